//! Sampling (`sampling/createMessage`): the server asks the client's model for a message.

use super::common::{JsonObject, ResultType, Role};
use super::content::{AudioContent, ContentBlock, ImageContent, TextContent};
use super::num;
use super::tasks::TaskMetadata;
use super::tools::Tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A tool call requested by the model (`"type": "tool_use"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolUseContent {
    /// The id the matching tool result refers to.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub input: JsonObject,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// The result of a tool call, given back to the model (`"type": "tool_result"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultContent {
    /// The id of the tool use this answers.
    pub tool_use_id: String,
    /// Unstructured content.
    pub content: Vec<ContentBlock>,
    /// Structured content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<serde_json::Value>,
    /// The call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// One block of a sampling message, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum SamplingMessageContentBlock {
    /// `"text"`.
    #[serde(rename = "text")]
    Text(TextContent),
    /// `"image"`.
    #[serde(rename = "image")]
    Image(ImageContent),
    /// `"audio"`.
    #[serde(rename = "audio")]
    Audio(AudioContent),
    /// `"tool_use"`.
    #[serde(rename = "tool_use")]
    ToolUse(ToolUseContent),
    /// `"tool_result"`.
    #[serde(rename = "tool_result")]
    ToolResult(ToolResultContent),
}

impl SamplingMessageContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(TextContent::new(text))
    }
}

/// The content of a sampling message: one block or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SamplingMessageContent {
    /// A single block.
    Single(SamplingMessageContentBlock),
    /// Several blocks.
    Multiple(Vec<SamplingMessageContentBlock>),
}

impl SamplingMessageContent {
    /// The blocks, whether one or several.
    pub fn blocks(&self) -> &[SamplingMessageContentBlock] {
        match self {
            Self::Single(b) => std::slice::from_ref(b),
            Self::Multiple(v) => v,
        }
    }
}

impl From<SamplingMessageContentBlock> for SamplingMessageContent {
    fn from(b: SamplingMessageContentBlock) -> Self {
        Self::Single(b)
    }
}

/// A message of a sampling conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SamplingMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: SamplingMessageContent,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

impl SamplingMessage {
    /// A message of one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: SamplingMessageContentBlock::text(text).into(),
            meta: None,
        }
    }
}

/// A hint for model selection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelHint {
    /// A full or partial model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The server's preferences for model selection, priorities from 0 to 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPreferences {
    /// Model name hints, in order of preference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<Vec<ModelHint>>,
    /// How much cost matters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub cost_priority: Option<f64>,
    /// How much speed matters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub speed_priority: Option<f64>,
    /// How much capability matters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub intelligence_priority: Option<f64>,
}

/// Which MCP servers' context to include in the prompt (deprecated by the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum IncludeContext {
    /// None.
    None,
    /// The requesting server's.
    ThisServer,
    /// Every connected server's.
    AllServers,
}

/// How the model may use the offered tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolChoice {
    /// The mode (absent means auto).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ToolChoiceMode>,
}

/// Tool choice modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    /// The model decides.
    Auto,
    /// The model must call a tool.
    Required,
    /// The model must not call tools.
    None,
}

/// Params of `sampling/createMessage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageRequestParams {
    /// Request metadata (2025-11-25).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Run as a task (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// The conversation.
    pub messages: Vec<SamplingMessage>,
    /// Model selection preferences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_preferences: Option<ModelPreferences>,
    /// A system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Context to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_context: Option<IncludeContext>,
    /// Sampling temperature.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub temperature: Option<f64>,
    /// The most tokens to sample.
    pub max_tokens: u64,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Provider-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    /// How the model may use the tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

/// The client's answer to `sampling/createMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageResult {
    /// Who speaks (the assistant).
    pub role: Role,
    /// What the model said.
    pub content: SamplingMessageContent,
    /// The model used.
    pub model: String,
    /// Why sampling stopped (`endTurn`, `stopSequence`, `maxTokens`, `toolUse`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (unused by input responses; kept for symmetry).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}
