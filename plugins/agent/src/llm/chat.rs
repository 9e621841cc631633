//! The chat-completions wire types we send and what a response (streamed or not) is
//! assembled into. Hand-written rather than taken from a strict schema crate: servers differ
//! in what they omit (a tool call's `index`, a `delta`), and only what the agent and the
//! sampling handler need is modelled, so unknown fields never fail a response.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation, tagged by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The text.
        content: String,
    },
    /// What the user says.
    User {
        /// Text, or parts (text, images, audio).
        content: UserContent,
    },
    /// What the model said: text and/or tool calls.
    Assistant {
        /// The text (`null` when the model only called tools).
        content: Option<String>,
        /// The tool calls.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result, as text.
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Message::System {
            content: text.into(),
        }
    }

    /// A user message of text.
    pub fn user(text: impl Into<String>) -> Self {
        Message::User {
            content: UserContent::Text(text.into()),
        }
    }

    /// A tool result.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }
}

/// The content of a user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UserContent {
    /// Plain text.
    Text(String),
    /// Typed parts.
    Parts(Vec<ContentPart>),
}

/// One part of a user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL (a `data:` URL for inline images).
    ImageUrl {
        /// The image.
        image_url: ImageUrl,
    },
    /// Audio, base64 with its format.
    InputAudio {
        /// The audio.
        input_audio: InputAudio,
    },
}

/// An image reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// `https://...` or `data:{mime};base64,{data}`.
    pub url: String,
}

/// Inline audio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputAudio {
    /// Base64 data.
    pub data: String,
    /// `wav` or `mp3`.
    pub format: String,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which its result names.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A function call.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// The function of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, a JSON text (as the model wrote it; it may be invalid).
    pub arguments: String,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionTool {
    /// `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its arguments.
    pub parameters: Value,
}

/// Which tools the model may or must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call at least one tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this function.
    Function(String),
}

impl ToolChoice {
    pub(crate) fn to_json(&self) -> Value {
        match self {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }
}

/// One chat-completions request, provider-independent (the client adds `stream` and the
/// name of the token limit its endpoint expects).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The model (for Azure's deployments URL the deployment decides; sent anyway).
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Functions the model may call.
    pub tools: Vec<FunctionTool>,
    /// Which tools the model may call.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools at once.
    pub parallel_tool_calls: Option<bool>,
    /// The most tokens to generate.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// The trace context the call's `chat` span is parented on (not sent to the model; see
    /// [`GenAiObserver`](crate::GenAiObserver)).
    pub parent: Option<crate::TraceContext>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The token limit.
    Length,
    /// The model wants tool results.
    ToolCalls,
    /// A content filter cut the answer.
    ContentFilter,
    /// Anything else the server said.
    Other(String),
    /// The server did not say.
    Unknown,
}

impl FinishReason {
    /// The OpenAI name (`stop`, `length`, `tool_calls`, `content_filter`, or what the
    /// server said); `None` when it said nothing.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FinishReason::Stop => Some("stop"),
            FinishReason::Length => Some("length"),
            FinishReason::ToolCalls => Some("tool_calls"),
            FinishReason::ContentFilter => Some("content_filter"),
            FinishReason::Other(s) => Some(s),
            FinishReason::Unknown => None,
        }
    }

    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "stop" | "end_turn" => FinishReason::Stop,
            "length" | "max_tokens" => FinishReason::Length,
            "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens generated.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Both.
    #[serde(default)]
    pub total_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// A whole answer, from a streamed or a plain response.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The response's id (may be empty).
    pub id: String,
    /// The model that answered (may be empty).
    pub model: String,
    /// The text, if any.
    pub content: Option<String>,
    /// The tool calls, in the order they started.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// The stop sequence that ended the answer, when the server says (vLLM's
    /// `stop_reason`; OpenAI does not tell).
    pub stop_sequence: Option<String>,
    /// Token counts, when the server reported them.
    pub usage: Option<Usage>,
}

impl ChatResponse {
    /// The assistant message to append to the conversation.
    pub fn to_message(&self) -> Message {
        // `content: null` is only valid next to tool calls; an empty answer is "".
        let content = match (&self.content, self.tool_calls.is_empty()) {
            (None, true) => Some(String::new()),
            (c, _) => c.clone(),
        };
        Message::Assistant {
            content,
            tool_calls: self.tool_calls.clone(),
        }
    }
}
