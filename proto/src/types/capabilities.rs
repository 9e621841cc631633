//! Client and server capabilities, with the `extensions` map of 2026-07-28.

use super::common::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a client supports. Sub-capabilities whose settings the runtime does not interpret are
/// kept as JSON objects so nothing a client sends is lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// Non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
    /// The client can list roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<RootsCapability>,
    /// The client can sample from a model (`{context?, tools?}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<JsonObject>,
    /// The client can elicit input from its user (`{form?, url?}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<JsonObject>,
    /// 2025-11-25 experimental tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<JsonObject>,
    /// Extensions by identifier (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
}

impl ClientCapabilities {
    /// True when every top-level capability named in `required` (an object such as
    /// `{"elicitation": {}}`) is declared.
    pub fn satisfies(&self, required: &JsonObject) -> bool {
        required.keys().all(|k| match k.as_str() {
            "roots" => self.roots.is_some(),
            "sampling" => self.sampling.is_some(),
            "elicitation" => self.elicitation.is_some(),
            "tasks" => self.tasks.is_some(),
            "experimental" => self.experimental.is_some(),
            "extensions" => match (required.get("extensions"), &self.extensions) {
                (Some(serde_json::Value::Object(want)), Some(have)) => {
                    want.keys().all(|e| have.contains_key(e))
                }
                (_, have) => have.is_some(),
            },
            _ => false,
        })
    }
}

/// Roots support.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootsCapability {
    /// The client notifies when its roots change (legacy only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
}

/// What a server offers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// Non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
    /// The server emits log messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<JsonObject>,
    /// The server offers argument completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<JsonObject>,
    /// The server offers prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<ListChangedCapability>,
    /// The server offers resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesCapability>,
    /// The server offers tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ListChangedCapability>,
    /// 2025-11-25 experimental tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<JsonObject>,
    /// Extensions by identifier (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
}

/// A capability that may announce list changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListChangedCapability {
    /// `notifications/*/list_changed` are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
}

/// Resources support.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesCapability {
    /// Clients may subscribe to updates of single resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<bool>,
    /// `notifications/resources/list_changed` are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
}
