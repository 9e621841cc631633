//! What a chat-completions call can fail with: one variant per cause a caller handles
//! differently (retry, fix the key, shorten the prompt, give up).

use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// The `{"error": {...}}` object OpenAI-compatible servers answer with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiError {
    /// `message`.
    pub message: String,
    /// `type`, e.g. `invalid_request_error`.
    pub kind: Option<String>,
    /// `code`, e.g. `array_above_max_length` or `rate_limit_exceeded`.
    pub code: Option<String>,
    /// `param`, e.g. `tools`.
    pub param: Option<String>,
}

impl ApiError {
    /// Reads an error object (or the whole body holding one under `error`); anything else
    /// becomes the message as text.
    pub(crate) fn from_value(v: &Value) -> ApiError {
        let obj = v.get("error").unwrap_or(v);
        let text = |k: &str| -> Option<String> {
            match obj.get(k)? {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            }
        };
        match obj {
            Value::String(s) => ApiError {
                message: s.clone(),
                ..ApiError::default()
            },
            _ => ApiError {
                message: text("message").unwrap_or_else(|| obj.to_string()),
                kind: text("type"),
                code: text("code"),
                param: text("param"),
            },
        }
    }

    /// Reads an error body, which may not be JSON at all (a proxy's HTML page).
    pub(crate) fn from_body(body: &str) -> ApiError {
        match serde_json::from_str::<Value>(body) {
            Ok(v) => ApiError::from_value(&v),
            Err(_) => ApiError {
                message: super::assemble::truncate(body.trim(), 500).to_owned(),
                ..ApiError::default()
            },
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        match (&self.kind, &self.code) {
            (Some(k), Some(c)) => write!(f, " ({k}, {c})"),
            (Some(x), None) | (None, Some(x)) => write!(f, " ({x})"),
            (None, None) => Ok(()),
        }
    }
}

/// A chat-completions call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The server refused the request (4xx/5xx); 429 and 5xx were retried first.
    #[error("the model server answered {status}: {error}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// What it said.
        error: ApiError,
        /// Its `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// The stream carried an error event.
    #[error("the model server failed mid-stream: {0}")]
    Stream(ApiError),
    /// The stream ended before `data: [DONE]`.
    #[error("the model's stream was cut off before it finished")]
    Truncated,
    /// No answer (or no next chunk of a stream) in time.
    #[error("the model server did not answer within {0:?}")]
    Timeout(Duration),
    /// The request could not be sent or the answer not read.
    #[error("cannot reach the model server: {0}")]
    Http(String),
    /// The answer was not what the protocol says.
    #[error("unreadable answer from the model server: {0}")]
    Decode(String),
    /// The caller cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl LlmError {
    /// The HTTP status, for an [`LlmError::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A short, low-cardinality name of the failure (the `error.type` of a `chat` span):
    /// the HTTP status of an API error, else `stream_error`, `truncated`, `timeout`,
    /// `http`, `decode` or `cancelled`.
    pub fn kind(&self) -> String {
        match self {
            LlmError::Api { status, .. } => status.to_string(),
            LlmError::Stream(_) => "stream_error".to_owned(),
            LlmError::Truncated => "truncated".to_owned(),
            LlmError::Timeout(_) => "timeout".to_owned(),
            LlmError::Http(_) => "http".to_owned(),
            LlmError::Decode(_) => "decode".to_owned(),
            LlmError::Cancelled => "cancelled".to_owned(),
        }
    }
}
