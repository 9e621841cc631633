//! A scripted fake OpenAI-compatible server: axum on 127.0.0.1, speaking the real wire format
//! (`data: <json>\n\n` events ending with `data: [DONE]`, `{"error": {...}}` bodies), with a
//! switch per real-world deviation, and a record of every request so tests can assert the
//! exact conversation a client sent.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Response, StatusCode, Uri};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One deviation of a real server from OpenAI's stream, each switchable.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Quirks {
    /// Tool-call deltas carry no `index` (Gemini, grok, SGLang).
    pub omit_index: bool,
    /// Every tool-call delta repeats the call's `id`.
    pub id_on_every_delta: bool,
    /// Each call comes whole in one delta, every one at index 0 (vLLM, Ollama).
    pub whole_call_in_one_delta: bool,
    /// The deltas of parallel calls alternate (0, 1, 0, 1, ...).
    pub interleaved_parallel_calls: bool,
    /// Argument fragments end inside an escape (`\` + `"`, or inside `\u00e9`).
    pub arguments_split_mid_escape: bool,
    /// Azure's first chunk: `choices: []` with `prompt_filter_results` and empty ids.
    pub azure_first_empty_choices: bool,
    /// Azure's late chunk: a choice with content-filter results and no `delta`.
    pub azure_trailing_filter_chunk: bool,
    /// `finish_reason: "stop"` although the message has tool calls (Gemini, some proxies).
    pub finish_reason_stop_with_tool_calls: bool,
    /// A usage chunk (`choices: []` + `usage`) even when not asked for.
    pub usage_chunk: bool,
    /// The network splits every event into 3-byte writes.
    pub byte_split: bool,
    /// A whole `chat.completion` even when `stream: true` was asked for.
    pub ignore_stream: bool,
    /// vLLM's `stop_reason: "END"`: the stop string that ended a text answer.
    pub stop_string: bool,
    /// SGLang's `matched_stop: "END"` (the same, under SGLang's name).
    pub matched_stop: bool,
    /// vLLM's `stop_reason: 2`: a stop *token* id (not a stop sequence).
    pub stop_token_id: bool,
}

/// How a stream ends.
#[derive(Debug, Clone, Default)]
pub(crate) enum Ending {
    /// `data: [DONE]`.
    #[default]
    Done,
    /// The connection is cut (the body errors) before `[DONE]`.
    Cut,
    /// A `data: {"error": ...}` event, then the connection closes.
    MidStreamError(Value),
}

/// What one request gets.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// The model answers with text.
    Text(String),
    /// The model calls tools: (id, name, arguments JSON text).
    Calls(Vec<(String, String, String)>),
    /// An error status with an OpenAI error body and optionally `Retry-After`.
    Status {
        /// The status.
        status: u16,
        /// `error.type`.
        kind: String,
        /// `error.code`.
        code: Option<String>,
        /// The `Retry-After` header.
        retry_after: Option<String>,
    },
}

/// A reply plus how it is delivered.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    /// What.
    pub reply: Reply,
    /// The quirks of the stream.
    pub quirks: Quirks,
    /// How the stream ends.
    pub ending: Ending,
    /// A pause before each event (the slow drip).
    pub drip: Duration,
}

impl Turn {
    /// A text answer.
    pub(crate) fn text(t: &str) -> Turn {
        Turn::of(Reply::Text(t.into()))
    }

    /// Tool calls.
    pub(crate) fn calls(calls: &[(&str, &str, &str)]) -> Turn {
        Turn::of(Reply::Calls(
            calls
                .iter()
                .map(|(i, n, a)| ((*i).into(), (*n).into(), (*a).into()))
                .collect(),
        ))
    }

    /// An error status.
    pub(crate) fn status(
        status: u16,
        kind: &str,
        code: Option<&str>,
        retry_after: Option<&str>,
    ) -> Turn {
        Turn::of(Reply::Status {
            status,
            kind: kind.into(),
            code: code.map(Into::into),
            retry_after: retry_after.map(Into::into),
        })
    }

    fn of(reply: Reply) -> Turn {
        Turn {
            reply,
            quirks: Quirks::default(),
            ending: Ending::Done,
            drip: Duration::ZERO,
        }
    }

    /// With these quirks.
    pub(crate) fn quirks(mut self, q: Quirks) -> Turn {
        self.quirks = q;
        self
    }

    /// Ending so.
    pub(crate) fn ending(mut self, e: Ending) -> Turn {
        self.ending = e;
        self
    }

    /// With a pause before each event.
    pub(crate) fn drip(mut self, d: Duration) -> Turn {
        self.drip = d;
        self
    }
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// Path and query.
    pub uri: String,
    /// The headers.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Value,
}

/// The credential the fake insists on.
#[derive(Debug, Clone)]
pub(crate) enum Auth {
    /// Anything goes.
    Any,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `api-key: <key>`.
    ApiKey(String),
}

struct State {
    auth: Auth,
    script: Mutex<VecDeque<Turn>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The running fake.
pub(crate) struct FakeLlm {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeLlm {
    /// Starts a fake that answers with `script`, one turn per request, in order.
    pub(crate) async fn start(auth: Auth, script: Vec<Turn>) -> FakeLlm {
        let state = Arc::new(State {
            auth,
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new().fallback({
            let state = state.clone();
            move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move { handle(&state, &uri, headers, &body).await }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeLlm { url, state, task }
    }

    /// `{url}/v1`, the base URL of an OpenAI-compatible client.
    pub(crate) fn base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The `messages` of request `n`.
    pub(crate) fn messages(&self, n: usize) -> Value {
        self.requests()[n].body["messages"].clone()
    }

    /// Turns not yet used.
    pub(crate) fn remaining(&self) -> usize {
        self.state.script.lock().unwrap().len()
    }
}

fn error_body(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

fn json_response(status: u16, body: &Value, headers: &[(&str, String)]) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

async fn handle(state: &State, uri: &Uri, headers: HeaderMap, body: &[u8]) -> Response<Body> {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    state.requests.lock().unwrap().push(Recorded {
        uri: uri.to_string(),
        headers: headers.clone(),
        body: body.clone(),
    });
    if !uri.path().ends_with("/chat/completions") {
        return json_response(
            404,
            &error_body("no such route", "invalid_request_error", None),
            &[],
        );
    }
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    let authorized = match &state.auth {
        Auth::Any => true,
        Auth::Bearer(t) => header("authorization") == format!("Bearer {t}"),
        Auth::ApiKey(k) => header("api-key") == k,
    };
    if !authorized {
        return json_response(
            401,
            &error_body(
                "Incorrect API key provided",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            &[],
        );
    }
    let Some(turn) = state.script.lock().unwrap().pop_front() else {
        return json_response(
            500,
            &error_body("the script is exhausted", "server_error", None),
            &[],
        );
    };
    let model = body["model"].as_str().unwrap_or("m").to_owned();
    match &turn.reply {
        Reply::Status {
            status,
            kind,
            code,
            retry_after,
        } => {
            let headers: Vec<(&str, String)> = retry_after
                .iter()
                .map(|r| ("retry-after", r.clone()))
                .collect();
            json_response(
                *status,
                &error_body(&format!("scripted {status}"), kind, code.as_deref()),
                &headers,
            )
        }
        _ if body["stream"] == json!(true) && !turn.quirks.ignore_stream => {
            let include_usage = body["stream_options"]["include_usage"] == json!(true);
            stream_response(&turn, &model, include_usage)
        }
        reply => {
            // A whole answer takes the drip once, before it is sent.
            tokio::time::sleep(turn.drip).await;
            json_response(200, &completion(reply, &model, &turn.quirks), &[])
        }
    }
}

fn usage() -> Value {
    json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
}

/// A whole `chat.completion`.
fn completion(reply: &Reply, model: &str, quirks: &Quirks) -> Value {
    let (message, finish) = match reply {
        Reply::Text(t) => (json!({"role": "assistant", "content": t}), "stop"),
        Reply::Calls(calls) => (
            json!({"role": "assistant", "content": null, "tool_calls": calls.iter().map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            }).collect::<Vec<_>>()}),
            if quirks.finish_reason_stop_with_tool_calls {
                "stop"
            } else {
                "tool_calls"
            },
        ),
        Reply::Status { .. } => unreachable!("handled before"),
    };
    let mut choice = json!({"index": 0, "message": message, "finish_reason": finish});
    if quirks.stop_string {
        choice["stop_reason"] = json!("END");
    }
    if quirks.matched_stop {
        choice["matched_stop"] = json!("END");
    }
    if quirks.stop_token_id {
        choice["stop_reason"] = json!(2);
    }
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [choice], "usage": usage()})
}

fn chunk(model: &str, choice: Value) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
        "choices": [choice]})
}

fn delta(model: &str, delta: Value) -> Value {
    chunk(
        model,
        json!({"index": 0, "delta": delta, "finish_reason": null}),
    )
}

/// Splits argument text into fragments: in three, or, with the quirk, right after every
/// backslash and in the middle of a `\uXXXX` escape.
fn fragments(args: &str, mid_escape: bool) -> Vec<String> {
    let chars: Vec<char> = args.chars().collect();
    let mut cuts = Vec::new();
    if mid_escape {
        for (i, c) in chars.iter().enumerate() {
            if *c == '\\' {
                cuts.push(i + 1);
                if chars.get(i + 1) == Some(&'u') {
                    cuts.push(i + 4);
                }
            }
        }
    } else {
        cuts.extend([chars.len() / 3, 2 * chars.len() / 3]);
    }
    cuts.retain(|&c| c > 0 && c < chars.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain([chars.len()]) {
        out.push(chars[start..c].iter().collect());
        start = c;
    }
    out
}

/// The events of a streamed reply, as JSON texts (without `data: `).
fn events(turn: &Turn, model: &str, include_usage: bool) -> Vec<String> {
    let q = &turn.quirks;
    let mut out: Vec<Value> = Vec::new();
    if q.azure_first_empty_choices {
        out.push(
            json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
                "hate": {"filtered": false, "severity": "safe"}}}]}),
        );
    }
    out.push(delta(model, json!({"role": "assistant", "content": null})));
    let finish = match &turn.reply {
        Reply::Text(t) => {
            let words: Vec<&str> = t.split_inclusive(' ').collect();
            for w in words {
                out.push(delta(model, json!({"content": w})));
            }
            "stop"
        }
        Reply::Calls(calls) => {
            let mut per_call: Vec<Vec<Value>> = Vec::new();
            for (i, (id, name, args)) in calls.iter().enumerate() {
                let mut deltas = Vec::new();
                if q.whole_call_in_one_delta {
                    deltas.push(json!({"index": 0, "id": id, "type": "function",
                        "function": {"name": name, "arguments": args}}));
                } else {
                    deltas.push(json!({"index": i, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}}));
                    for f in fragments(args, q.arguments_split_mid_escape) {
                        let mut d = json!({"index": i, "function": {"arguments": f}});
                        if q.id_on_every_delta {
                            d["id"] = json!(id);
                        }
                        deltas.push(d);
                    }
                }
                if q.omit_index {
                    for d in &mut deltas {
                        d.as_object_mut().unwrap().remove("index");
                    }
                }
                per_call.push(deltas);
            }
            let mut ordered = Vec::new();
            if q.interleaved_parallel_calls {
                let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
                for k in 0..longest {
                    for call in &per_call {
                        if let Some(d) = call.get(k) {
                            ordered.push(d.clone());
                        }
                    }
                }
            } else {
                ordered = per_call.into_iter().flatten().collect();
            }
            for d in ordered {
                out.push(delta(model, json!({"tool_calls": [d]})));
            }
            if q.finish_reason_stop_with_tool_calls {
                "stop"
            } else {
                "tool_calls"
            }
        }
        Reply::Status { .. } => unreachable!("handled before"),
    };
    if !matches!(turn.ending, Ending::Done) {
        // A broken stream stops before it says why the model stopped.
        return out.iter().map(Value::to_string).collect();
    }
    out.push(chunk(
        model,
        json!({"index": 0, "delta": {}, "finish_reason": finish}),
    ));
    if q.azure_trailing_filter_chunk {
        out.push(chunk(
            model,
            json!({"index": 0, "finish_reason": null,
            "content_filter_offsets": {"check_offset": 0, "start_offset": 0, "end_offset": 10},
            "content_filter_results": {"hate": {"filtered": false, "severity": "safe"}}}),
        ));
    }
    if include_usage || q.usage_chunk {
        out.push(
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1,
            "model": model, "choices": [], "usage": usage()}),
        );
    }
    out.iter().map(Value::to_string).collect()
}

fn stream_response(turn: &Turn, model: &str, include_usage: bool) -> Response<Body> {
    let mut frames: Vec<Result<Bytes, std::io::Error>> = events(turn, model, include_usage)
        .into_iter()
        .map(|e| Ok(Bytes::from(format!("data: {e}\n\n"))))
        .collect();
    match &turn.ending {
        Ending::Done => frames.push(Ok(Bytes::from_static(b"data: [DONE]\n\n"))),
        Ending::Cut => frames.push(Err(std::io::Error::other("connection cut"))),
        Ending::MidStreamError(e) => {
            frames.push(Ok(Bytes::from(format!(
                "data: {}\n\n",
                json!({"error": e})
            ))));
        }
    }
    if turn.quirks.byte_split {
        frames = frames
            .into_iter()
            .flat_map(|f| match f {
                Ok(b) => b
                    .chunks(3)
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
            .collect();
    }
    let drip = turn.drip;
    let stream = futures_util::stream::iter(frames).then(move |f| async move {
        if !drip.is_zero() {
            tokio::time::sleep(drip).await;
        }
        f
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

use futures_util::StreamExt as _;
