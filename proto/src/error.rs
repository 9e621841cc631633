//! JSON-RPC error objects and the error codes MCP uses.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// The numeric error codes of JSON-RPC 2.0 and of MCP.
pub mod code {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i32 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i32 = -32600;
    /// The method does not exist, or was removed in the caller's revision.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Invalid method parameters (also: resource not found, missing `_meta`, since 2026-07-28).
    pub const INVALID_PARAMS: i32 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Legacy revisions' "resource not found".
    pub const RESOURCE_NOT_FOUND_LEGACY: i32 = -32002;
    /// Legacy: the client declined URL elicitation (2025-11-25).
    pub const URL_ELICITATION_REQUIRED: i32 = -32042;
    /// 2026-07-28: an HTTP header does not match the body.
    pub const HEADER_MISMATCH: i32 = -32020;
    /// 2026-07-28: the request needs a client capability the caller did not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i32 = -32021;
    /// 2026-07-28: the requested protocol version is not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
    /// Implementation-defined: the request was cancelled or its connection closed.
    pub const REQUEST_CANCELLED: i32 = -32000;
    /// Implementation-defined: the peer did not answer in time.
    pub const REQUEST_TIMEOUT: i32 = -32001;
}

/// A JSON-RPC error object: `{code, message, data?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorObject {
    /// One of [`code`]'s constants, or an implementation-defined one.
    pub code: i32,
    /// A short human-readable description.
    pub message: Cow<'static, str>,
    /// Machine-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and message.
    pub fn new(code: i32, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
    /// Adds `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
    /// Replaces the message.
    pub fn with_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        self.message = message.into();
        self
    }
    /// -32700.
    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(code::PARSE_ERROR, format!("Parse error: {detail}"))
    }
    /// -32600.
    pub fn invalid_request(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(code::INVALID_REQUEST, detail)
    }
    /// -32601 naming the method.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }
    /// -32602.
    pub fn invalid_params(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(code::INVALID_PARAMS, detail)
    }
    /// -32603.
    pub fn internal(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(code::INTERNAL_ERROR, detail)
    }
    /// -32022 with `data: {supported, requested}`.
    pub fn unsupported_version(requested: &str) -> Self {
        Self::new(
            code::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
        )
        .with_data(serde_json::json!({
            "supported": crate::ProtocolVersion::supported_strs(),
            "requested": requested,
        }))
    }
    /// -32021 with `data.requiredCapabilities`.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    pub fn missing_capability(required: Value) -> Self {
        Self::new(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
        )
        .with_data(serde_json::json!({ "requiredCapabilities": required }))
    }
}

impl std::fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}
