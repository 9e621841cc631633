//! The reserved `_meta` keys and the per-request metadata of the modern generation.

use crate::{ClientCapabilities, Implementation, LoggingLevel, ProgressToken};
use serde::{Deserialize, Serialize};

/// `_meta` key: the protocol revision of a modern request.
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities on a modern request.
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's identity on a modern request.
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: the server's identity on a modern result.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key: the lowest log level the caller wants `notifications/message` for.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key: tags notifications of a `subscriptions/listen` stream.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key (2025-11-25 tasks): ties a message to a task, `{"taskId": ...}`.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The identifier of the tasks extension (2026-07-28, SEP-2663), the key under
/// `capabilities.extensions` that declares it.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// `_meta` key: the token progress notifications refer to.
pub const PROGRESS_TOKEN: &str = "progressToken";
/// `_meta` key: W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
/// `_meta` key: W3C trace state.
pub const TRACESTATE: &str = "tracestate";
/// `_meta` key: W3C baggage (application-defined key-value pairs that travel with the trace).
pub const BAGGAGE: &str = "baggage";

/// The `_meta` object of a request, with the keys the runtime acts on. Other keys are kept
/// out of this struct; handlers that need them read the raw params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// Present on every modern request.
    #[serde(
        rename = "io.modelcontextprotocol/protocolVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub protocol_version: Option<String>,
    /// The modern caller's capabilities.
    #[serde(
        rename = "io.modelcontextprotocol/clientCapabilities",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_capabilities: Option<ClientCapabilities>,
    /// The modern caller's identity.
    #[serde(
        rename = "io.modelcontextprotocol/clientInfo",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_info: Option<Implementation>,
    /// Modern: log messages for this request only at or above this level.
    #[serde(
        rename = "io.modelcontextprotocol/logLevel",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub log_level: Option<LoggingLevel>,
    /// Progress notifications for this request refer to this token.
    #[serde(
        rename = "progressToken",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub progress_token: Option<ProgressToken>,
    /// W3C trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// W3C trace state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// W3C baggage, passed on unchanged to what the request calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baggage: Option<String>,
}
