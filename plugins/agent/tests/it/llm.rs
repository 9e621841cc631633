//! The chat-completions client against the fake server: every stream quirk, both Azure URL
//! shapes, error statuses, retries, timeouts, truncation and cancellation.

use crate::fake::{Auth, Ending, FakeLlm, Quirks, Turn};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolyard_agent::llm::{
    ChatRequest, ChatResponse, Endpoint, FinishReason, LlmClient, LlmError, LlmOptions, Message,
    ToolCall, Usage,
};

pub(crate) fn fast_options() -> LlmOptions {
    LlmOptions {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        idle_timeout: Duration::from_secs(10),
        ..LlmOptions::default()
    }
}

fn client(fake: &FakeLlm, options: LlmOptions) -> LlmClient {
    LlmClient::new(
        Endpoint::compatible(fake.base_url(), Some("sk-test".into())),
        options,
    )
    .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    }
}

async fn stream(client: &LlmClient) -> (Result<ChatResponse, LlmError>, String) {
    let mut text = String::new();
    let r = client
        .stream(&request(), &CancellationToken::new(), &mut |t| {
            text.push_str(t)
        })
        .await;
    (r, text)
}

/// Arguments with an escaped quote, a backslash and a `\u` escape (for the mid-escape split).
const ECHO_ARGS: &str = r#"{"message":"say \"hi\" \\ caf\u00e9"}"#;
const ADD_ARGS: &str = r#"{"a":1,"b":2}"#;

fn two_calls() -> Turn {
    Turn::calls(&[("call_1", "echo", ECHO_ARGS), ("call_2", "add", ADD_ARGS)])
}

/// Streams the two parallel calls with `quirks` and checks they come out whole and in order.
async fn assert_two_calls_survive(quirks: Quirks) -> ChatResponse {
    let fake = FakeLlm::start(Auth::Any, vec![two_calls().quirks(quirks)]).await;
    let (r, text) = stream(&client(&fake, fast_options())).await;
    let r = r.unwrap();
    assert_eq!(text, "");
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall::new("call_1", "echo", ECHO_ARGS),
            ToolCall::new("call_2", "add", ADD_ARGS)
        ]
    );
    let args: Value = serde_json::from_str(&r.tool_calls[0].function.arguments).unwrap();
    assert_eq!(args, json!({"message": "say \"hi\" \\ café"}));
    r
}

#[tokio::test]
async fn a_streamed_answer_reaches_the_caller_piece_by_piece_with_its_usage() {
    let fake = FakeLlm::start(
        Auth::Bearer("sk-test".into()),
        vec![Turn::text("Hello there, friend")],
    )
    .await;
    let mut pieces = Vec::new();
    let r = client(&fake, fast_options())
        .stream(&request(), &CancellationToken::new(), &mut |t| {
            pieces.push(t.to_owned())
        })
        .await
        .unwrap();
    assert_eq!(pieces, ["Hello ", "there, ", "friend"]);
    assert_eq!(r.content.as_deref(), Some("Hello there, friend"));
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert_eq!(
        r.usage,
        Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15
        })
    );
    let sent = &fake.requests()[0];
    assert_eq!(sent.uri, "/v1/chat/completions");
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
}

#[tokio::test]
async fn streamed_parallel_tool_calls_are_assembled_in_order() {
    let r = assert_two_calls_survive(Quirks::default()).await;
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn tool_call_deltas_without_an_index_are_assembled() {
    assert_two_calls_survive(Quirks {
        omit_index: true,
        ..Quirks::default()
    })
    .await;
}

#[tokio::test]
async fn tool_call_deltas_repeating_the_id_are_assembled() {
    assert_two_calls_survive(Quirks {
        id_on_every_delta: true,
        ..Quirks::default()
    })
    .await;
}

#[tokio::test]
async fn whole_calls_in_one_delta_all_at_index_zero_stay_separate_calls() {
    assert_two_calls_survive(Quirks {
        whole_call_in_one_delta: true,
        ..Quirks::default()
    })
    .await;
}

#[tokio::test]
async fn interleaved_deltas_of_parallel_calls_are_kept_apart() {
    assert_two_calls_survive(Quirks {
        interleaved_parallel_calls: true,
        ..Quirks::default()
    })
    .await;
}

#[tokio::test]
async fn arguments_split_inside_an_escape_are_joined_intact() {
    assert_two_calls_survive(Quirks {
        arguments_split_mid_escape: true,
        ..Quirks::default()
    })
    .await;
}

#[tokio::test]
async fn azures_empty_first_chunk_and_trailing_filter_chunk_are_skipped() {
    let r = assert_two_calls_survive(Quirks {
        azure_first_empty_choices: true,
        azure_trailing_filter_chunk: true,
        ..Quirks::default()
    })
    .await;
    assert_eq!(r.id, "c1");
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn finish_reason_stop_with_tool_calls_still_yields_the_calls() {
    let r = assert_two_calls_survive(Quirks {
        finish_reason_stop_with_tool_calls: true,
        ..Quirks::default()
    })
    .await;
    assert_eq!(r.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn a_usage_chunk_with_empty_choices_is_read_even_unasked() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("ok").quirks(Quirks {
            usage_chunk: true,
            ..Quirks::default()
        })],
    )
    .await;
    let options = LlmOptions {
        include_usage: false,
        ..fast_options()
    };
    let (r, _) = stream(&client(&fake, options)).await;
    assert_eq!(r.unwrap().usage.map(|u| u.total_tokens), Some(15));
    assert!(fake.requests()[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn events_split_across_network_writes_inside_a_character_are_reassembled() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("naïve café ünïcode").quirks(Quirks {
            byte_split: true,
            ..Quirks::default()
        })],
    )
    .await;
    let (r, text) = stream(&client(&fake, fast_options())).await;
    assert_eq!(r.unwrap().content.as_deref(), Some("naïve café ünïcode"));
    assert_eq!(text, "naïve café ünïcode");
}

#[tokio::test]
async fn a_non_streamed_call_returns_the_same_answer() {
    let fake = FakeLlm::start(Auth::Any, vec![two_calls(), Turn::text("done")]).await;
    let c = client(&fake, fast_options());
    let r = c
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[1], ToolCall::new("call_2", "add", ADD_ARGS));
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.usage.map(|u| u.prompt_tokens), Some(10));
    let r = c
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("done"));
    assert!(fake.requests()[0].body.get("stream").is_none());
}

#[tokio::test]
async fn azures_deployments_url_carries_the_api_version_and_the_api_key_header() {
    let fake = FakeLlm::start(Auth::ApiKey("azure-key".into()), vec![Turn::text("hi")]).await;
    let c = LlmClient::new(
        Endpoint::azure_deployment(fake.url.clone(), "gpt-4o-prod", None, "azure-key"),
        fast_options(),
    )
    .unwrap();
    let r = c
        .stream(&request(), &CancellationToken::new(), &mut |_| {})
        .await;
    assert_eq!(r.unwrap().content.as_deref(), Some("hi"));
    let sent = &fake.requests()[0];
    assert_eq!(
        sent.uri,
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    );
    assert!(sent.headers.get("authorization").is_none());
}

#[tokio::test]
async fn azures_v1_url_needs_no_api_version() {
    let fake = FakeLlm::start(Auth::ApiKey("azure-key".into()), vec![Turn::text("hi")]).await;
    let c = LlmClient::new(Endpoint::azure_v1(&fake.url, "azure-key"), fast_options()).unwrap();
    c.complete(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(fake.requests()[0].uri, "/openai/v1/chat/completions");
}

#[tokio::test]
async fn a_bad_request_is_reported_with_its_code_and_not_retried() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::status(
            400,
            "invalid_request_error",
            Some("array_above_max_length"),
            None,
        )],
    )
    .await;
    let (r, _) = stream(&client(&fake, fast_options())).await;
    match r.unwrap_err() {
        LlmError::Api {
            status: 400, error, ..
        } => {
            assert_eq!(error.code.as_deref(), Some("array_above_max_length"));
            assert_eq!(error.kind.as_deref(), Some("invalid_request_error"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_wrong_key_is_a_401_with_the_servers_message() {
    let fake = FakeLlm::start(Auth::Bearer("right".into()), vec![]).await;
    let (r, _) = stream(&client(&fake, fast_options())).await;
    let e = r.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert!(e.to_string().contains("Incorrect API key provided"), "{e}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_429_is_retried_after_the_servers_retry_after() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::status(429, "requests", Some("rate_limit_exceeded"), Some("1")),
            Turn::text("finally"),
        ],
    )
    .await;
    let started = Instant::now();
    let (r, _) = stream(&client(&fake, fast_options())).await;
    assert_eq!(r.unwrap().content.as_deref(), Some("finally"));
    // Our own backoff is at most 125 ms here: the wait was the server's second.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn a_retry_after_beyond_the_maximum_is_returned_at_once() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::status(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            Some("3600"),
        )],
    )
    .await;
    let started = Instant::now();
    let (r, _) = stream(&client(&fake, fast_options())).await;
    match r.unwrap_err() {
        LlmError::Api {
            status: 429,
            retry_after,
            ..
        } => {
            assert_eq!(retry_after, Some(Duration::from_secs(3600)));
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_and_the_last_is_reported() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::status(500, "server_error", None, None),
            Turn::status(503, "server_error", None, None),
            Turn::status(502, "server_error", None, None),
            Turn::text("never reached"),
        ],
    )
    .await;
    let options = LlmOptions {
        max_retries: 2,
        ..fast_options()
    };
    let (r, _) = stream(&client(&fake, options)).await;
    assert_eq!(r.unwrap_err().status(), Some(502));
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(fake.remaining(), 1);
}

#[tokio::test]
async fn a_server_error_then_success_is_transparent() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::status(503, "server_error", None, None),
            Turn::text("ok"),
        ],
    )
    .await;
    let c = client(&fake, fast_options());
    let r = c
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("ok"));
}

#[tokio::test]
async fn an_error_event_mid_stream_fails_the_call_with_its_message() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("partial answer").ending(Ending::MidStreamError(
            json!({"message": "The server had an error while processing your request", "type": "server_error"}),
        ))],
    )
    .await;
    let (r, text) = stream(&client(&fake, fast_options())).await;
    let e = r.unwrap_err();
    assert!(matches!(e, LlmError::Stream(_)), "{e:?}");
    assert!(e.to_string().contains("while processing"), "{e}");
    assert_eq!(text, "partial answer");
    assert_eq!(fake.requests().len(), 1, "a started stream is not repeated");
}

#[tokio::test]
async fn a_connection_cut_before_done_is_reported_as_truncated() {
    // The drip lets the headers and the first events out before the cut.
    let fake = FakeLlm::start(
        Auth::Any,
        vec![two_calls()
            .ending(Ending::Cut)
            .drip(Duration::from_millis(20))],
    )
    .await;
    let (r, _) = stream(&client(&fake, fast_options())).await;
    assert!(matches!(r, Err(LlmError::Truncated)), "{r:?}");
    assert_eq!(fake.requests().len(), 1, "a started stream is not repeated");
}

#[tokio::test]
async fn a_stream_that_stalls_longer_than_the_idle_timeout_times_out() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("one two three").drip(Duration::from_millis(600))],
    )
    .await;
    let options = LlmOptions {
        idle_timeout: Duration::from_millis(200),
        max_retries: 0,
        ..fast_options()
    };
    let (r, _) = stream(&client(&fake, options)).await;
    assert!(matches!(r, Err(LlmError::Timeout(_))), "{r:?}");
}

#[tokio::test]
async fn a_slow_but_steady_drip_within_the_idle_timeout_completes() {
    let fake = FakeLlm::start(Auth::Any, vec![two_calls().drip(Duration::from_millis(40))]).await;
    let options = LlmOptions {
        idle_timeout: Duration::from_millis(800),
        ..fast_options()
    };
    let (r, _) = stream(&client(&fake, options)).await;
    assert_eq!(r.unwrap().tool_calls.len(), 2);
}

#[tokio::test]
async fn cancelling_a_call_ends_it_at_once() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("a b c d e f").drip(Duration::from_millis(500))],
    )
    .await;
    let c = client(&fake, fast_options());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let mut text = String::new();
    let r = c
        .stream(&request(), &cancel, &mut |t| text.push_str(t))
        .await;
    assert!(matches!(r, Err(LlmError::Cancelled)), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_unreachable_server_is_an_http_error_after_the_retries() {
    let closed = toolyard_testkit::ClosedPort::new();
    let url = format!("http://127.0.0.1:{}/v1", closed.port());
    let c = LlmClient::new(
        Endpoint::compatible(url, None),
        LlmOptions {
            max_retries: 1,
            ..fast_options()
        },
    )
    .unwrap();
    let e = c
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Http(_)), "{e:?}");
}

#[tokio::test]
async fn a_whole_answer_slower_than_the_request_timeout_times_out() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("late").drip(Duration::from_millis(800))],
    )
    .await;
    let options = LlmOptions {
        request_timeout: Duration::from_millis(200),
        ..fast_options()
    };
    let e = client(&fake, options)
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Timeout(_)), "{e:?}");
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_is_read_as_one_answer() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("all at once").quirks(Quirks {
            ignore_stream: true,
            ..Quirks::default()
        })],
    )
    .await;
    let (r, text) = stream(&client(&fake, fast_options())).await;
    assert_eq!(r.unwrap().content.as_deref(), Some("all at once"));
    assert_eq!(text, "all at once");
}

/// Collects what a `tracing` subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_chat_call_is_a_genai_client_span_with_model_provider_and_usage() {
    let fake = FakeLlm::start(Auth::Any, vec![Turn::text("hi")]).await;
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let (r, _) = stream(&client(&fake, fast_options())).await;
    drop(guard);
    r.unwrap();
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for field in [
        "chat{",
        "otel.name=chat m",
        "gen_ai.operation.name=\"chat\"",
        "gen_ai.provider.name=\"openai\"",
        "gen_ai.request.model=m",
        "gen_ai.response.model=\"m\"",
        "gen_ai.usage.input_tokens=10",
        "gen_ai.usage.output_tokens=5",
    ] {
        assert!(logged.contains(field), "{field} missing in:\n{logged}");
    }
}
