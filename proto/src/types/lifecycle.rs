//! The legacy (2025-11-25 and older) lifecycle: `initialize` and its result. `ping` uses
//! [`crate::RequestParams`] and [`crate::EmptyResult`].

use super::capabilities::{ClientCapabilities, ServerCapabilities};
use super::common::{Implementation, JsonObject, ResultType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params of `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeRequestParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The newest revision the client supports.
    pub protocol_version: String,
    /// What the client supports.
    pub capabilities: ClientCapabilities,
    /// Who the client is.
    pub client_info: Implementation,
}

/// The result of `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The revision the server chose.
    pub protocol_version: String,
    /// What the server offers.
    pub capabilities: ServerCapabilities,
    /// Who the server is.
    pub server_info: Implementation,
    /// How to use the server, for the model's system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (modern only; never set on this legacy result).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}
