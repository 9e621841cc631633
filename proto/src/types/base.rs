//! The parameter and result shapes shared by many methods.

use super::common::{JsonObject, ResultType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params that carry only `_meta` (`ping`, `server/discover`, `roots/list`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestParams {
    /// Request metadata (modern requests: protocol version, client info and capabilities).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// Notification params that carry only `_meta` (the `list_changed` notifications).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationParams {
    /// Notification metadata (e.g. the subscription id of a `subscriptions/listen` stream).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// A result with no content beyond its metadata (`ping`, `resources/subscribe`, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmptyResult {
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (modern only; the server splices it in).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}
