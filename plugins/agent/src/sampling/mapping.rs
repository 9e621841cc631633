//! `sampling/createMessage` to a chat request and the chat answer back to a
//! `CreateMessageResult`, field by field:
//!
//! | MCP | chat |
//! |---|---|
//! | `systemPrompt` | a first `system` message |
//! | text / image / audio of a user message | `text` / `image_url` (a `data:` URL) / `input_audio` parts |
//! | `tool_use` in an assistant message | `tool_calls` (arguments = the input as JSON) |
//! | `tool_result` in a user message | a `tool` message per result, before the rest of the message |
//! | `tools`, `toolChoice.mode` | `tools` (names made valid, see `names`), `tool_choice` |
//! | `maxTokens`, `temperature`, `stopSequences` | the token limit, `temperature`, `stop` (at most 4) |
//! | `includeContext`, `metadata` | not sent: the first is soft-deprecated, the second provider-specific |
//!
//! Stop reasons come back as `endTurn`, `maxTokens`, `toolUse`, `contentFilter`, and
//! `stopSequence`. The last needs the server to say which stop matched: vLLM's
//! `stop_reason` and SGLang's `matched_stop` name the string (a number there is a stop
//! *token*, an end of turn). OpenAI and Azure answer `finish_reason: "stop"` for a natural
//! end and a stop sequence alike and strip the sequence from the text, so nothing tells the
//! two apart: their stops read `endTurn`, rather than a guess. A server that did not say
//! why it stopped gives no `stopReason`.
//!
//! Content a chat model cannot take (audio other than WAV or MP3, images in an assistant
//! message, tool use from the user) is refused with -32602 rather than silently dropped.

use crate::feedback::result_text;
use crate::llm::{
    ChatRequest, ChatResponse, ContentPart, FinishReason, FunctionTool, ImageUrl, InputAudio,
    Message, ToolCall, ToolChoice, UserContent,
};
use crate::names::function_names;
use crate::toolbox::parameters;
use std::collections::HashMap;
use toolyard_proto::{
    CallToolResult, CreateMessageRequestParams, CreateMessageResult, ErrorObject, Role,
    SamplingMessageContent, SamplingMessageContentBlock, ToolChoiceMode, ToolUseContent,
};

/// OpenAI takes at most this many stop sequences.
const MAX_STOP: usize = 4;

/// The chat request for `params`, and the function names back to the MCP tool names.
pub(crate) fn to_chat(
    params: &CreateMessageRequestParams,
    model: &str,
) -> Result<(ChatRequest, HashMap<String, String>), ErrorObject> {
    let tools = params.tools.as_deref().unwrap_or_default();
    let pairs: Vec<(&str, &str)> = tools.iter().map(|t| ("", t.name.as_str())).collect();
    let functions = function_names(&pairs);
    let to_function: HashMap<&str, &str> = tools
        .iter()
        .map(|t| t.name.as_str())
        .zip(functions.iter().map(String::as_str))
        .collect();
    let back: HashMap<String, String> = functions
        .iter()
        .cloned()
        .zip(tools.iter().map(|t| t.name.clone()))
        .collect();
    let mut messages = Vec::new();
    if let Some(system) = params.system_prompt.as_ref().filter(|s| !s.is_empty()) {
        messages.push(Message::system(system.clone()));
    }
    for m in &params.messages {
        match m.role {
            Role::User => user(&m.content, &mut messages)?,
            Role::Assistant => messages.push(assistant(&m.content, &to_function)?),
        }
    }
    let request = ChatRequest {
        model: model.to_owned(),
        messages,
        tools: tools
            .iter()
            .zip(&functions)
            .map(|(t, f)| FunctionTool {
                name: f.clone(),
                description: t.description.clone(),
                parameters: parameters(&t.input_schema),
            })
            .collect(),
        tool_choice: params
            .tool_choice
            .as_ref()
            .and_then(|c| c.mode)
            .map(|m| match m {
                ToolChoiceMode::Auto => ToolChoice::Auto,
                ToolChoiceMode::Required => ToolChoice::Required,
                ToolChoiceMode::None => ToolChoice::None,
            }),
        parallel_tool_calls: None,
        max_tokens: Some(params.max_tokens),
        temperature: params.temperature,
        stop: params
            .stop_sequences
            .iter()
            .flatten()
            .take(MAX_STOP)
            .cloned()
            .collect(),
        // The server's own context (the span of the tool that asked), so the sampling
        // call joins its trace.
        parent: crate::TraceContext::from_meta(params.meta.as_ref()),
    };
    Ok((request, back))
}

fn audio_format(mime: &str) -> Option<&'static str> {
    match mime.split(';').next().unwrap_or("").trim() {
        "audio/wav" | "audio/x-wav" | "audio/wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" => Some("mp3"),
        _ => None,
    }
}

fn user(content: &SamplingMessageContent, out: &mut Vec<Message>) -> Result<(), ErrorObject> {
    let mut parts = Vec::new();
    for block in content.blocks() {
        match block {
            SamplingMessageContentBlock::Text(t) => parts.push(ContentPart::Text {
                text: t.text.clone(),
            }),
            SamplingMessageContentBlock::Image(i) => parts.push(ContentPart::ImageUrl {
                image_url: ImageUrl {
                    url: format!("data:{};base64,{}", i.mime_type, i.data),
                },
            }),
            SamplingMessageContentBlock::Audio(a) => {
                let format = audio_format(&a.mime_type).ok_or_else(|| {
                    ErrorObject::invalid_params(format!(
                        "audio of type {} cannot be sent to the model (only WAV and MP3)",
                        a.mime_type
                    ))
                })?;
                parts.push(ContentPart::InputAudio {
                    input_audio: InputAudio {
                        data: a.data.clone(),
                        format: format.to_owned(),
                    },
                });
            }
            SamplingMessageContentBlock::ToolResult(r) => {
                let result = CallToolResult {
                    content: r.content.clone(),
                    structured_content: r.structured_content.clone(),
                    is_error: r.is_error,
                    ..CallToolResult::default()
                };
                out.push(Message::tool(r.tool_use_id.clone(), result_text(&result)));
            }
            SamplingMessageContentBlock::ToolUse(_) => {
                return Err(ErrorObject::invalid_params(
                    "a user message cannot contain tool_use",
                ))
            }
        }
    }
    let only_text = parts.iter().all(|p| matches!(p, ContentPart::Text { .. }));
    match parts.len() {
        0 => {}
        _ if only_text => {
            let text: Vec<String> = parts
                .into_iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text),
                    _ => None,
                })
                .collect();
            out.push(Message::user(text.join("\n")));
        }
        _ => out.push(Message::User {
            content: UserContent::Parts(parts),
        }),
    }
    Ok(())
}

fn assistant(
    content: &SamplingMessageContent,
    to_function: &HashMap<&str, &str>,
) -> Result<Message, ErrorObject> {
    let mut text: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    for block in content.blocks() {
        match block {
            SamplingMessageContentBlock::Text(t) => text.push(&t.text),
            SamplingMessageContentBlock::ToolUse(u) => calls.push(ToolCall::new(
                u.id.clone(),
                to_function
                    .get(u.name.as_str())
                    .map_or_else(|| crate::names::sanitize(&u.name), |f| (*f).to_owned()),
                serde_json::Value::Object(u.input.clone()).to_string(),
            )),
            _ => {
                return Err(ErrorObject::invalid_params(
                    "an assistant message can hold only text and tool_use",
                ))
            }
        }
    }
    Ok(Message::Assistant {
        content: (!text.is_empty()).then(|| text.join("\n")),
        tool_calls: calls,
    })
}

/// The MCP stop reason of a chat answer.
pub(crate) fn stop_reason(answer: &ChatResponse) -> Option<String> {
    if !answer.tool_calls.is_empty() {
        return Some("toolUse".into());
    }
    if answer.finish_reason == FinishReason::Stop && answer.stop_sequence.is_some() {
        return Some("stopSequence".into());
    }
    match &answer.finish_reason {
        FinishReason::Stop => Some("endTurn".into()),
        FinishReason::Length => Some("maxTokens".into()),
        FinishReason::ToolCalls => Some("toolUse".into()),
        FinishReason::ContentFilter => Some("contentFilter".into()),
        FinishReason::Other(s) => Some(s.clone()),
        FinishReason::Unknown => None,
    }
}

/// The `CreateMessageResult` of a chat answer; `back` maps function names to tool names.
pub(crate) fn from_chat(
    answer: &ChatResponse,
    model: &str,
    back: &HashMap<String, String>,
) -> Result<CreateMessageResult, ErrorObject> {
    let mut blocks = Vec::new();
    if let Some(t) = answer.content.as_ref().filter(|t| !t.is_empty()) {
        blocks.push(SamplingMessageContentBlock::text(t.clone()));
    }
    for call in &answer.tool_calls {
        let Ok(serde_json::Value::Object(input)) =
            serde_json::from_str::<serde_json::Value>(&call.function.arguments)
        else {
            return Err(ErrorObject::internal(format!(
                "the model called `{}` with arguments that are not a JSON object",
                call.function.name
            )));
        };
        blocks.push(SamplingMessageContentBlock::ToolUse(ToolUseContent {
            id: call.id.clone(),
            name: back
                .get(&call.function.name)
                .cloned()
                .unwrap_or_else(|| call.function.name.clone()),
            input,
            meta: None,
        }));
    }
    let content = match blocks.len() {
        0 => SamplingMessageContent::Single(SamplingMessageContentBlock::text("")),
        1 => SamplingMessageContent::Single(blocks.remove(0)),
        _ => SamplingMessageContent::Multiple(blocks),
    };
    Ok(CreateMessageResult {
        role: Role::Assistant,
        content,
        model: if answer.model.is_empty() {
            model.to_owned()
        } else {
            answer.model.clone()
        },
        stop_reason: stop_reason(answer),
        meta: None,
        result_type: None,
    })
}
