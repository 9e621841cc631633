//! Logging: `logging/setLevel` (2025-11-25) and `notifications/message`.

use super::common::{JsonObject, LoggingLevel};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params of `logging/setLevel` (2025-11-25; 2026-07-28 puts the level in `_meta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetLevelRequestParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The lowest level to send.
    pub level: LoggingLevel,
}

/// Params of `notifications/message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoggingMessageNotificationParams {
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Severity.
    pub level: LoggingLevel,
    /// The logger's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    /// Any JSON value.
    pub data: serde_json::Value,
}

impl LoggingMessageNotificationParams {
    /// A log message without a logger name.
    pub fn new(level: LoggingLevel, data: serde_json::Value) -> Self {
        Self {
            meta: None,
            level,
            logger: None,
            data,
        }
    }
}
