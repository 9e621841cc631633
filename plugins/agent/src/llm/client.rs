//! [`LlmClient`]: one chat-completions call, streamed or not, on the tree's reqwest.
//!
//! A call is: build the body for the endpoint (`stream`, `stream_options.include_usage`,
//! `max_tokens` or `max_completion_tokens`), POST it with the endpoint's credential, repeat on
//! 429/5xx after the server's `Retry-After` or our backoff, and assemble the answer. A streamed
//! call is retried only until its response starts: once text has reached the caller a repeat
//! would say it twice. Every wait (connecting, each chunk, each backoff) also watches the
//! caller's [`CancellationToken`]; dropping the future drops the connection as well. Each
//! call is a `chat` span with the GenAI semantic conventions' attributes (model, provider,
//! token usage, finish reason), for whatever `tracing` subscriber or exporter is installed.

use super::assemble::{parse_completion, Assembler, Chunk};
use super::chat::{ChatRequest, ChatResponse};
use super::endpoint::Endpoint;
use super::error::{ApiError, LlmError};
use super::retry::{backoff, retry_after, retryable};
use super::sse::{Decoder, MAX_EVENT_BYTES};
use crate::observe::{Observed, Operation, Outcome, SharedObserver, TraceContext};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::Instrument;

/// Which name the token limit goes under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_completion_tokens` (OpenAI's current name; its reasoning models refuse the old one).
    MaxCompletionTokens,
    /// `max_tokens` (what most compatible servers read).
    #[default]
    MaxTokens,
}

/// Timeouts, retries and wire details of an [`LlmClient`].
#[derive(Debug, Clone)]
pub struct LlmOptions {
    /// Establishing the connection.
    pub connect_timeout: Duration,
    /// A whole non-streamed answer.
    pub request_timeout: Duration,
    /// The response's headers, and then each next chunk of a stream.
    pub idle_timeout: Duration,
    /// Repeats after a 429/5xx or a failed connection (0 = none).
    pub max_retries: u32,
    /// The first backoff; it doubles per attempt.
    pub initial_backoff: Duration,
    /// The longest backoff of our own.
    pub max_backoff: Duration,
    /// A `Retry-After` longer than this is not waited for: the error is returned.
    pub max_retry_after: Duration,
    /// The token limit's field name.
    pub max_tokens_field: MaxTokensField,
    /// Ask for the usage chunk at the end of a stream (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Extra headers on every request (e.g. Azure's `aoai-evals: preview`).
    pub headers: Vec<(String, String)>,
}

impl Default for LlmOptions {
    fn default() -> Self {
        LlmOptions {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            max_tokens_field: MaxTokensField::default(),
            include_usage: true,
            headers: Vec::new(),
        }
    }
}

/// A client for one OpenAI-compatible chat-completions endpoint. Cheap to clone.
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    endpoint: Endpoint,
    options: LlmOptions,
    observer: Option<SharedObserver>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("endpoint", &self.endpoint)
            .field("options", &self.options)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl LlmClient {
    /// A client for `endpoint`.
    pub fn new(endpoint: Endpoint, options: LlmOptions) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| LlmError::Http(e.to_string()))?;
        Ok(LlmClient {
            http,
            endpoint,
            options,
            observer: None,
        })
    }

    /// Reports each call (a `chat {model}` span), and the runs and tool calls of the agents
    /// built on this client, to `observer`.
    pub fn with_observer(mut self, observer: SharedObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The observer, if any.
    pub fn observer(&self) -> Option<&SharedObserver> {
        self.observer.as_ref()
    }

    /// Starts the observed `chat` span of one call.
    fn observe(&self, request: &ChatRequest, stream: bool) -> Observed {
        let Some(observer) = &self.observer else {
            return Observed::none();
        };
        let url = reqwest::Url::parse(&self.endpoint.chat_url()).ok();
        Observed::start(
            Some(observer),
            &Operation::Chat {
                provider: self.endpoint.provider_name(),
                model: &request.model,
                server_address: url.as_ref().and_then(|u| u.host_str()),
                server_port: url.as_ref().and_then(reqwest::Url::port_or_known_default),
                stream,
                max_tokens: request.max_tokens,
                temperature: request.temperature,
                stop_sequences: &request.stop,
            },
            request.parent.as_ref(),
        )
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The options.
    pub fn options(&self) -> &LlmOptions {
        &self.options
    }

    /// One call without streaming.
    pub async fn complete(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let span = self.span(request, false);
        let observed = self.observe(request, false);
        let trace = observed.context().or_else(|| request.parent.clone());
        let outcome = self
            .complete_inner(request, cancel, trace.as_ref())
            .instrument(span.clone())
            .await;
        record(&span, &outcome);
        finish(observed, &outcome);
        outcome
    }

    async fn complete_inner(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        trace: Option<&TraceContext>,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.body(request, false);
        let timeout = self.options.request_timeout;
        let attempt = async {
            let response = self.send(&body, cancel, trace).await?;
            let text = response
                .text()
                .await
                .map_err(|e| LlmError::Http(e.to_string()))?;
            parse_completion(&text)
        };
        cancellable(cancel, async {
            tokio::time::timeout(timeout, attempt)
                .await
                .unwrap_or(Err(LlmError::Timeout(timeout)))
        })
        .await
    }

    /// One streamed call: each piece of text goes to `on_text` as it arrives, and the
    /// assembled answer (text, tool calls, finish reason, usage) is returned at the end.
    pub async fn stream(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatResponse, LlmError> {
        let span = self.span(request, true);
        let observed = self.observe(request, true);
        let trace = observed.context().or_else(|| request.parent.clone());
        let outcome = self
            .stream_inner(request, cancel, on_text, trace.as_ref())
            .instrument(span.clone())
            .await;
        record(&span, &outcome);
        finish(observed, &outcome);
        outcome
    }

    async fn stream_inner(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_text: &mut (dyn FnMut(&str) + Send),
        trace: Option<&TraceContext>,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.body(request, true);
        let response = self.send(&body, cancel, trace).await?;
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let idle = self.options.idle_timeout;
        if !is_sse {
            // A server that ignores `stream: true` answers with one whole completion.
            let text = cancellable(cancel, async {
                tokio::time::timeout(idle, response.text())
                    .await
                    .map_err(|_| LlmError::Timeout(idle))?
                    .map_err(|e| LlmError::Http(e.to_string()))
            })
            .await?;
            let answer = parse_completion(&text)?;
            if let Some(t) = &answer.content {
                on_text(t);
            }
            return Ok(answer);
        }
        let mut bytes = response.bytes_stream();
        let mut decoder = Decoder::default();
        let mut assembler = Assembler::default();
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
                next = tokio::time::timeout(idle, bytes.next()) => {
                    next.map_err(|_| LlmError::Timeout(idle))?
                }
            };
            let (events, ended) = match next {
                Some(Ok(chunk)) => match decoder.feed(&chunk) {
                    Some(events) => (events, false),
                    None => {
                        return Err(LlmError::Decode(format!(
                            "a stream event is larger than {MAX_EVENT_BYTES} bytes"
                        )))
                    }
                },
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "chat stream broke off");
                    return Err(LlmError::Truncated);
                }
                None => (decoder.finish().into_iter().collect(), true),
            };
            for event in events {
                let data = event.data.trim();
                if data == "[DONE]" {
                    return Ok(assembler.finish());
                }
                if data.is_empty() {
                    continue;
                }
                if event.name == "error" {
                    let v: Value = serde_json::from_str(data).unwrap_or(Value::String(data.into()));
                    return Err(LlmError::Stream(ApiError::from_value(&v)));
                }
                assembler.push(Chunk::parse(data)?, on_text)?;
            }
            if ended {
                break;
            }
        }
        // The stream ended without `[DONE]`: acceptable only once the model said it finished
        // (a few servers never send `[DONE]`); otherwise the connection was cut.
        if assembler.finished() {
            Ok(assembler.finish())
        } else {
            Err(LlmError::Truncated)
        }
    }

    /// The GenAI client span of one call.
    fn span(&self, request: &ChatRequest, stream: bool) -> tracing::Span {
        tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", request.model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = self.endpoint.provider_name(),
            gen_ai.request.model = %request.model,
            gen_ai.request.stream = stream,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            error.type = Empty,
        )
    }

    /// POSTs `body`, repeating on transient failures; returns the first 2xx response. The
    /// request carries `trace` (the `chat` span's context, else the caller's) as its W3C
    /// `traceparent`/`tracestate` headers, so an instrumented model server or LLM gateway
    /// joins the trace.
    async fn send(
        &self,
        body: &Value,
        cancel: &CancellationToken,
        trace: Option<&TraceContext>,
    ) -> Result<reqwest::Response, LlmError> {
        let url = self.endpoint.chat_url();
        let bytes = serde_json::to_vec(body).map_err(|e| LlmError::Decode(e.to_string()))?;
        let mut attempt = 0;
        loop {
            let mut request = self
                .http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes.clone());
            if let Some((name, value)) = self.endpoint.auth_header() {
                request = request.header(name, value);
            }
            for (name, value) in &self.options.headers {
                request = request.header(name, value);
            }
            if let Some(t) = trace {
                // A caller's text that is no header value is left off, not sent to fail.
                let headers = [
                    ("traceparent", Some(&t.traceparent)),
                    ("tracestate", t.tracestate.as_ref()),
                ];
                for (name, value) in headers {
                    if let Some(v) =
                        value.and_then(|v| reqwest::header::HeaderValue::from_str(v).ok())
                    {
                        request = request.header(name, v);
                    }
                }
            }
            let idle = self.options.idle_timeout;
            let outcome = cancellable(cancel, async {
                tokio::time::timeout(idle, request.send())
                    .await
                    .map_err(|_| LlmError::Timeout(idle))
            })
            .await?;
            let (error, wait) = match outcome {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status().as_u16();
                    let wait = retry_after(response.headers());
                    let text = response.text().await.unwrap_or_default();
                    let error = LlmError::Api {
                        status,
                        error: ApiError::from_body(&text),
                        retry_after: wait,
                    };
                    if !retryable(status) {
                        return Err(error);
                    }
                    (error, wait)
                }
                Err(e) => (LlmError::Http(error_chain(&e)), None),
            };
            if attempt >= self.options.max_retries {
                return Err(error);
            }
            let wait = match wait {
                Some(w) if w > self.options.max_retry_after => return Err(error),
                Some(w) => w,
                None => backoff(
                    self.options.initial_backoff,
                    self.options.max_backoff,
                    attempt,
                ),
            };
            tracing::debug!(%error, ?wait, attempt, "retrying the chat-completions request");
            attempt += 1;
            tokio::select! {
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The JSON body of `request` for this endpoint.
    pub fn body(&self, request: &ChatRequest, stream: bool) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), request.model.clone().into());
        body.insert(
            "messages".into(),
            serde_json::to_value(&request.messages).unwrap_or(Value::Array(Vec::new())),
        );
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": t}))
                .collect();
            body.insert("tools".into(), tools.into());
            if let Some(p) = request.parallel_tool_calls {
                body.insert("parallel_tool_calls".into(), p.into());
            }
        }
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), choice.to_json());
        }
        if let Some(max) = request.max_tokens {
            let field = match self.options.max_tokens_field {
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
                MaxTokensField::MaxTokens => "max_tokens",
            };
            body.insert(field.into(), max.into());
        }
        if let Some(t) = request.temperature {
            body.insert("temperature".into(), t.into());
        }
        if !request.stop.is_empty() {
            body.insert("stop".into(), request.stop.clone().into());
        }
        if stream {
            body.insert("stream".into(), true.into());
            if self.options.include_usage {
                body.insert("stream_options".into(), json!({"include_usage": true}));
            }
        }
        Value::Object(body)
    }
}

/// Ends the observed span with what the answer says.
fn finish(observed: Observed, outcome: &Result<ChatResponse, LlmError>) {
    match outcome {
        Ok(answer) => observed.finish(&Outcome {
            response_model: Some(answer.model.as_str()).filter(|m| !m.is_empty()),
            response_id: Some(answer.id.as_str()).filter(|i| !i.is_empty()),
            finish_reasons: answer.finish_reason.as_str().into_iter().collect(),
            usage: answer.usage,
            error_type: None,
        }),
        Err(e) => {
            let kind = e.kind();
            observed.finish(&Outcome {
                error_type: Some(&kind),
                ..Outcome::default()
            });
        }
    }
}

/// Puts what the answer says on its span.
fn record(span: &tracing::Span, outcome: &Result<ChatResponse, LlmError>) {
    match outcome {
        Ok(answer) => {
            span.record("gen_ai.response.model", answer.model.as_str());
            span.record(
                "gen_ai.response.finish_reasons",
                tracing::field::debug(&answer.finish_reason),
            );
            if let Some(u) = answer.usage {
                span.record("gen_ai.usage.input_tokens", u.prompt_tokens);
                span.record("gen_ai.usage.output_tokens", u.completion_tokens);
            }
        }
        Err(e) => {
            span.record("error.type", e.kind().as_str());
        }
    }
}

/// Runs `f` unless `cancel` fires first.
async fn cancellable<T>(
    cancel: &CancellationToken,
    f: impl Future<Output = Result<T, LlmError>>,
) -> Result<T, LlmError> {
    tokio::select! {
        () = cancel.cancelled() => Err(LlmError::Cancelled),
        r = f => r,
    }
}

/// A reqwest error with its causes (reqwest's own message is often just "error sending
/// request").
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
