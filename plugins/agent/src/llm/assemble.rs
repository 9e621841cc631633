//! Turns what a server sends back, a whole `chat.completion` or a stream of
//! `chat.completion.chunk`s, into one [`ChatResponse`].
//!
//! Streamed tool calls are where real servers disagree, so the accumulator trusts nothing a
//! strict schema would require:
//! - a delta whose `id` is known belongs to that call, wherever its `index` points;
//! - a new `id` starts a new call, even when its `index` is one another call already uses
//!   (Ollama and vLLM send every whole call at index 0);
//! - a delta with an `index` and no `id` belongs to the latest call with that index
//!   (OpenAI sends the `id` on the first delta only);
//! - a delta with neither belongs to the call being streamed (Gemini, SGLang and grok omit
//!   `index`), unless it names a function while that call already has arguments, which
//!   can only be the start of the next call;
//! - `choices: []` chunks (Azure's prompt-filter chunk first, the usage chunk last), choices
//!   without a `delta` (Azure's trailing content-filter chunk) and `null`s anywhere are
//!   skipped; arguments are concatenated as text and parsed only once the call is complete,
//!   so a fragment that ends inside an escape is harmless.

use super::chat::{ChatResponse, FinishReason, ToolCall, Usage};
use super::error::{ApiError, LlmError};
use serde::Deserialize;
use serde_json::Value;

/// One `chat.completion.chunk` (or, with `message` instead of `delta`, one whole
/// `chat.completion`), every field optional.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Chunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    message: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
    /// vLLM's extension: the stop string that ended the answer (or a token id).
    #[serde(default)]
    stop_reason: Option<Value>,
    /// SGLang's name for the same.
    #[serde(default)]
    matched_stop: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// A string by the spec; some servers send the object itself.
    #[serde(default)]
    arguments: Option<Value>,
}

/// A tool call being assembled.
#[derive(Debug, Default)]
struct Partial {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Accumulates chunks into one response.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    id: String,
    model: String,
    content: Option<String>,
    calls: Vec<Partial>,
    /// The call the last tool-call delta went to.
    current: Option<usize>,
    finish: Option<String>,
    stop_sequence: Option<String>,
    usage: Option<Usage>,
}

impl Chunk {
    /// Parses one event's data.
    pub(crate) fn parse(data: &str) -> Result<Chunk, LlmError> {
        serde_json::from_str(data)
            .map_err(|e| LlmError::Decode(format!("{e}: {}", truncate(data, 200))))
    }
}

impl Assembler {
    /// Takes one chunk in; text deltas go to `on_text` as they come. A chunk that is an
    /// error (`{"error": {...}}`, the mid-stream form) fails the response.
    pub(crate) fn push(
        &mut self,
        chunk: Chunk,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), LlmError> {
        if let Some(error) = chunk.error {
            return Err(LlmError::Stream(ApiError::from_value(&error)));
        }
        if let Some(id) = chunk.id.filter(|s| !s.is_empty()) {
            self.id = id;
        }
        if let Some(model) = chunk.model.filter(|s| !s.is_empty()) {
            self.model = model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        // With `n > 1` only the first choice is ours.
        for choice in chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.index.unwrap_or(0) == 0)
        {
            if let Some(delta) = choice.delta.or(choice.message) {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    on_text(&text);
                    self.content.get_or_insert_with(String::new).push_str(&text);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.tool_call(call);
                }
            }
            // A string is a stop sequence; a number is a stop token (an end of turn).
            if let Some(Value::String(stop)) = choice.stop_reason.or(choice.matched_stop) {
                self.stop_sequence = Some(stop);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish = Some(reason);
            }
        }
        Ok(())
    }

    fn tool_call(&mut self, delta: ToolCallDelta) {
        let id = delta.id.filter(|s| !s.is_empty());
        let (name, arguments) = match delta.function {
            Some(f) => (
                f.name.filter(|s| !s.is_empty()),
                match f.arguments {
                    Some(Value::String(s)) => s,
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                },
            ),
            None => (None, String::new()),
        };
        // A function name on a call that already has arguments starts the next call.
        let starts_new =
            |p: &Partial| name.is_some() && !p.name.is_empty() && !p.arguments.is_empty();
        let slot = match (&id, delta.index) {
            (Some(id), index) => self
                .calls
                .iter()
                .position(|c| c.id.as_deref() == Some(id.as_str()))
                .or_else(|| {
                    // A call first seen by its index alone, whose id comes late.
                    index.and_then(|i| {
                        self.calls
                            .iter()
                            .rposition(|c| c.index == Some(i) && c.id.is_none())
                    })
                }),
            (None, Some(i)) => self
                .calls
                .iter()
                .rposition(|c| c.index == Some(i))
                .filter(|&s| !starts_new(&self.calls[s])),
            (None, None) => self.current.filter(|&s| !starts_new(&self.calls[s])),
        };
        let slot = match slot {
            Some(s) => s,
            None => {
                self.calls.push(Partial {
                    index: delta.index,
                    ..Partial::default()
                });
                self.calls.len() - 1
            }
        };
        self.current = Some(slot);
        let call = &mut self.calls[slot];
        if call.id.is_none() {
            call.id = id;
        }
        if let Some(name) = name {
            // Some servers repeat the name on every delta; a different one is a continuation.
            if call.name != name {
                call.name.push_str(&name);
            }
        }
        call.arguments.push_str(&arguments);
    }

    /// Whether the model said why it stopped.
    pub(crate) fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The assembled response.
    pub(crate) fn finish(self) -> ChatResponse {
        let mut used: Vec<String> = self.calls.iter().filter_map(|c| c.id.clone()).collect();
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (n, call) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() && call.arguments.trim().is_empty() {
                continue;
            }
            let id = match call.id {
                Some(id) => id,
                None => {
                    // A server that sends no ids still needs results to name their calls.
                    let mut k = n;
                    let mut candidate = format!("call_{k}");
                    while used.contains(&candidate) {
                        k += 1;
                        candidate = format!("call_{k}");
                    }
                    used.push(candidate.clone());
                    candidate
                }
            };
            let arguments = if call.arguments.trim().is_empty() {
                "{}".to_owned()
            } else {
                call.arguments
            };
            tool_calls.push(ToolCall::new(id, call.name, arguments));
        }
        ChatResponse {
            id: self.id,
            model: self.model,
            content: self.content,
            tool_calls,
            finish_reason: self
                .finish
                .as_deref()
                .map_or(FinishReason::Unknown, FinishReason::parse),
            stop_sequence: self.stop_sequence,
            usage: self.usage,
        }
    }
}

/// Parses a whole (non-streamed) `chat.completion`.
pub(crate) fn parse_completion(body: &str) -> Result<ChatResponse, LlmError> {
    let chunk = Chunk::parse(body)?;
    let mut assembler = Assembler::default();
    assembler.push(chunk, &mut |_| {})?;
    Ok(assembler.finish())
}

pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(chunks: &[&str]) -> ChatResponse {
        let mut a = Assembler::default();
        for c in chunks {
            a.push(Chunk::parse(c).unwrap(), &mut |_| {}).unwrap();
        }
        a.finish()
    }

    #[test]
    fn a_delta_with_an_index_and_no_id_continues_the_call_with_that_index() {
        let r = assemble(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"y","arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"1}"}}]}}]}"#,
        ]);
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall::new("a", "x", "{}"),
                ToolCall::new("b", "y", "{\"q\":1}")
            ]
        );
    }

    #[test]
    fn a_new_id_at_a_used_index_is_a_new_call_and_missing_ids_are_made_up() {
        let r = assemble(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"x","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"z","arguments":{"k":1}}}]}}]}"#,
        ]);
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall::new("a", "x", "{}"),
                ToolCall::new("b", "x", "{}"),
                ToolCall::new("call_2", "z", "{\"k\":1}"),
            ]
        );
    }

    #[test]
    fn a_mid_stream_error_chunk_fails_the_response() {
        let mut a = Assembler::default();
        let e = a
            .push(
                Chunk::parse(r#"{"error":{"message":"overloaded","type":"server_error"}}"#)
                    .unwrap(),
                &mut |_| {},
            )
            .unwrap_err();
        assert!(e.to_string().contains("overloaded"), "{e}");
    }
}
