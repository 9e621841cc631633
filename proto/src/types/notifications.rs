//! Notification params shared by both directions: cancellation, progress, resource updates.

use super::common::{JsonObject, ProgressToken};
use super::num;
use crate::jsonrpc::RequestId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params of `notifications/cancelled`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelledNotificationParams {
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The request to cancel (required since 2026-07-28; tasks are cancelled otherwise in
    /// 2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Params of `notifications/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressNotificationParams {
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The token from the request's `_meta.progressToken`.
    pub progress_token: ProgressToken,
    /// Progress so far; increases with every notification.
    #[serde(serialize_with = "num::f64")]
    pub progress: f64,
    /// The total, if known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub total: Option<f64>,
    /// A human-readable description of the progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Params of `notifications/resources/updated`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUpdatedNotificationParams {
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The URI of the resource that changed.
    pub uri: String,
}
