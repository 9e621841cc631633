//! The LLM-backed sampling handler: the request mapping the fake model receives, the result
//! mapping back, the model allow-list, the per-server budget, the review hook, and a real
//! server's tool sampling through the agent's connections.

use crate::agent_loop::{demo_http, entries, GENERATIONS};
use crate::fake::{Auth, FakeLlm, Quirks, Turn};
use crate::llm::fast_options;
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolyard::proto::{
    AudioContent, CreateMessageRequestParams, ImageContent, Implementation, IncludeContext,
    ModelHint, ModelPreferences, Role, SamplingMessage, SamplingMessageContent,
    SamplingMessageContentBlock, TextContent, Tool, ToolChoice, ToolChoiceMode, ToolResultContent,
    ToolUseContent,
};
use toolyard_agent::llm::{Endpoint, LlmClient, Message};
use toolyard_agent::{
    Agent, AgentOptions, LlmSampler, Review, SamplerConfig, ToolHandlers, Toolbox, REJECTED,
};

fn sampler(fake: &FakeLlm, budget: Option<u64>) -> LlmSampler {
    LlmSampler::new(
        LlmClient::new(Endpoint::compatible(fake.base_url(), None), fast_options()).unwrap(),
        SamplerConfig {
            default_model: "small-model".into(),
            allowed_models: vec!["small-model".into(), "claude-sonnet-x".into()],
            token_budget_per_server: budget,
            requests_per_minute: None,
        },
    )
}

fn text(role: Role, t: &str) -> SamplingMessage {
    SamplingMessage::text(role, t)
}

fn object(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn every_sampling_field_is_mapped_to_the_chat_request_and_tool_use_comes_back() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::calls(&[("call_9", "files_read", r#"{"path":"/b"}"#)])],
    )
    .await;
    let params = CreateMessageRequestParams {
        system_prompt: Some("You are terse.".into()),
        messages: vec![
            SamplingMessage {
                role: Role::User,
                content: SamplingMessageContent::Multiple(vec![
                    SamplingMessageContentBlock::Text(TextContent::new("Look:")),
                    SamplingMessageContentBlock::Image(ImageContent {
                        data: "iVBORw0KGgo=".into(),
                        mime_type: "image/png".into(),
                        annotations: None,
                        meta: None,
                    }),
                    SamplingMessageContentBlock::Audio(AudioContent {
                        data: "UklGRg==".into(),
                        mime_type: "audio/wav".into(),
                        annotations: None,
                        meta: None,
                    }),
                ]),
                meta: None,
            },
            SamplingMessage {
                role: Role::Assistant,
                content: SamplingMessageContent::Single(SamplingMessageContentBlock::ToolUse(
                    ToolUseContent {
                        id: "tu_1".into(),
                        name: "files.read".into(),
                        input: object(json!({"path": "/a"})),
                        meta: None,
                    },
                )),
                meta: None,
            },
            SamplingMessage {
                role: Role::User,
                content: SamplingMessageContent::Multiple(vec![
                    SamplingMessageContentBlock::ToolResult(ToolResultContent {
                        tool_use_id: "tu_1".into(),
                        content: vec![toolyard::proto::ContentBlock::text("no such file")],
                        structured_content: None,
                        is_error: Some(true),
                        meta: None,
                    }),
                    SamplingMessageContentBlock::Text(TextContent::new("Try /b")),
                ]),
                meta: None,
            },
        ],
        model_preferences: Some(ModelPreferences {
            hints: Some(vec![
                ModelHint {
                    name: Some("gpt-5".into()),
                },
                ModelHint {
                    name: Some("sonnet".into()),
                },
            ]),
            ..ModelPreferences::default()
        }),
        include_context: Some(IncludeContext::AllServers),
        temperature: Some(0.5),
        max_tokens: 64,
        stop_sequences: Some(vec![
            "a".into(),
            "b".into(),
            "c".into(),
            "d".into(),
            "e".into(),
        ]),
        metadata: Some(object(json!({"secret": "not for the model"}))),
        tools: Some(vec![Tool::new(
            "files.read",
            object(json!({"type": "object", "properties": {"path": {"type": "string"}}})),
        )
        .with_description("Reads a file")]),
        tool_choice: Some(ToolChoice {
            mode: Some(ToolChoiceMode::Required),
        }),
        ..CreateMessageRequestParams::default()
    };
    let result = sampler(&fake, None)
        .create_message("srv", params)
        .await
        .unwrap();
    let sent = &fake.requests()[0].body;
    assert_eq!(
        *sent,
        json!({
            "model": "claude-sonnet-x",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "tu_1", "type": "function", "function": {"name": "files_read", "arguments": "{\"path\":\"/a\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "tu_1", "content": "Error: no such file"},
                {"role": "user", "content": "Try /b"}
            ],
            "tools": [{"type": "function", "function": {"name": "files_read", "description": "Reads a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
            "tool_choice": "required",
            "max_tokens": 64,
            "temperature": 0.5,
            "stop": ["a", "b", "c", "d"]
        })
    );
    assert_eq!(result.role, Role::Assistant);
    assert_eq!(result.model, "claude-sonnet-x");
    assert_eq!(result.stop_reason.as_deref(), Some("toolUse"));
    assert_eq!(
        result.content,
        SamplingMessageContent::Single(SamplingMessageContentBlock::ToolUse(ToolUseContent {
            id: "call_9".into(),
            name: "files.read".into(),
            input: object(json!({"path": "/b"})),
            meta: None,
        }))
    );
}

fn simple(max_tokens: u64) -> CreateMessageRequestParams {
    CreateMessageRequestParams {
        messages: vec![text(Role::User, "hi")],
        max_tokens,
        ..CreateMessageRequestParams::default()
    }
}

#[tokio::test]
async fn a_text_answer_maps_back_with_the_stop_reason_and_the_default_model() {
    let fake = FakeLlm::start(Auth::Any, vec![Turn::text("hello")]).await;
    let r = sampler(&fake, None)
        .create_message("srv", simple(10))
        .await
        .unwrap();
    assert_eq!(
        r.content,
        SamplingMessageContent::Single(SamplingMessageContentBlock::text("hello"))
    );
    assert_eq!(r.stop_reason.as_deref(), Some("endTurn"));
    assert_eq!(fake.requests()[0].body["model"], "small-model");
}

#[tokio::test]
async fn each_server_has_its_own_token_budget() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("one"), Turn::text("two"), Turn::text("three")],
    )
    .await;
    let s = sampler(&fake, Some(20));
    s.create_message("a", simple(100)).await.unwrap();
    assert_eq!(s.used("a"), 15);
    assert_eq!(fake.requests()[0].body["max_tokens"], 20);
    s.create_message("a", simple(100)).await.unwrap();
    assert_eq!(
        fake.requests()[1].body["max_tokens"],
        5,
        "capped to what is left"
    );
    let e = s.create_message("a", simple(100)).await.unwrap_err();
    assert_eq!(e.code, REJECTED);
    assert!(
        e.message.contains("budget of `a` is spent"),
        "{}",
        e.message
    );
    // Another server still has its own.
    s.create_message("b", simple(100)).await.unwrap();
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn the_review_hook_can_refuse_before_the_model_is_asked() {
    let fake = FakeLlm::start(Auth::Any, vec![Turn::text("never")]).await;
    let s = sampler(&fake, None).with_review(Arc::new(
        |server: &str, p: &CreateMessageRequestParams| {
            let verdict = if server == "untrusted" && p.max_tokens > 5 {
                Review::Reject("not now".into())
            } else {
                Review::Approve
            };
            Box::pin(async move { verdict })
        },
    ));
    let e = s.create_message("untrusted", simple(10)).await.unwrap_err();
    assert_eq!((e.code, &*e.message), (REJECTED, "not now"));
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn audio_a_chat_model_cannot_take_is_refused_as_invalid_params() {
    let fake = FakeLlm::start(Auth::Any, vec![]).await;
    let params = CreateMessageRequestParams {
        messages: vec![SamplingMessage {
            role: Role::User,
            content: SamplingMessageContent::Single(SamplingMessageContentBlock::Audio(
                AudioContent {
                    data: "AAAA".into(),
                    mime_type: "audio/ogg".into(),
                    annotations: None,
                    meta: None,
                },
            )),
            meta: None,
        }],
        max_tokens: 10,
        ..CreateMessageRequestParams::default()
    };
    let e = sampler(&fake, None)
        .create_message("srv", params)
        .await
        .unwrap_err();
    assert_eq!(e.code, -32602);
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_samples_during_an_agent_run_is_answered_by_the_model() {
    let (url, _server) = demo_http().await;
    for protocol in GENERATIONS {
        let fake = FakeLlm::start(
            Auth::Any,
            vec![
                Turn::calls(&[("c1", "summarize", r#"{"text":"a long story"}"#)]),
                Turn::text("short story"),
                Turn::text("It is a short story."),
            ],
        )
        .await;
        let llm =
            LlmClient::new(Endpoint::compatible(fake.base_url(), None), fast_options()).unwrap();
        let sampler = Arc::new(LlmSampler::new(
            llm.clone(),
            SamplerConfig {
                default_model: "sampler-model".into(),
                ..SamplerConfig::default()
            },
        ));
        let handlers = ToolHandlers {
            sampler: Some(sampler.clone()),
            ..ToolHandlers::default()
        };
        let toolbox = Toolbox::connect(
            &entries(&url, protocol),
            Implementation::new("t", "1"),
            &handlers,
            &[],
        )
        .await
        .unwrap();
        let agent = Agent::new(llm, toolbox.clone(), AgentOptions::new("agent-model"));
        let mut history = vec![Message::user("summarize a long story")];
        let outcome = agent
            .run(&mut history, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.text.as_deref(), Some("It is a short story."));
        let requests = fake.requests();
        assert_eq!(requests[1].body["model"], "sampler-model", "{protocol:?}");
        assert_eq!(
            requests[1].body["messages"],
            json!([{"role": "user", "content": "Summarize: a long story"}])
        );
        assert_eq!(requests[1].body["max_tokens"], 100);
        assert_eq!(
            requests[2].body["messages"][2]["content"],
            "Summary: short story"
        );
        assert_eq!(sampler.used("demo"), 15);
        toolbox.close().await;
    }
}

#[tokio::test]
async fn a_stop_string_the_server_names_is_a_stop_sequence() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("one, two").quirks(Quirks {
            stop_string: true,
            ..Quirks::default()
        })],
    )
    .await;
    let mut params = simple(10);
    params.stop_sequences = Some(vec!["END".into()]);
    let r = sampler(&fake, None)
        .create_message("srv", params)
        .await
        .unwrap();
    assert_eq!(r.stop_reason.as_deref(), Some("stopSequence"));
    assert_eq!(fake.requests()[0].body["stop"], json!(["END"]));
}

#[tokio::test]
async fn each_server_may_sample_only_so_often() {
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::text("a"), Turn::text("b"), Turn::text("c")],
    )
    .await;
    let s = LlmSampler::new(
        LlmClient::new(Endpoint::compatible(fake.base_url(), None), fast_options()).unwrap(),
        SamplerConfig {
            default_model: "m".into(),
            requests_per_minute: Some(2),
            ..SamplerConfig::default()
        },
    );
    s.create_message("busy", simple(5)).await.unwrap();
    s.create_message("busy", simple(5)).await.unwrap();
    let e = s.create_message("busy", simple(5)).await.unwrap_err();
    assert_eq!(e.code, REJECTED);
    assert!(
        e.message.contains("too many sampling requests"),
        "{}",
        e.message
    );
    s.create_message("calm", simple(5)).await.unwrap();
    assert_eq!(fake.requests().len(), 3);
}

/// SGLang names the matched stop `matched_stop`; a number in vLLM's `stop_reason` is a stop
/// token, an end of turn; and OpenAI's plain `stop` cannot tell a stop sequence from a
/// natural end, so it reads `endTurn` even when stop sequences were asked for.
#[tokio::test]
async fn only_a_named_stop_string_is_a_stop_sequence_and_openais_plain_stop_is_an_end_of_turn() {
    let cases = [
        (
            Quirks {
                matched_stop: true,
                ..Quirks::default()
            },
            "stopSequence",
        ),
        (
            Quirks {
                stop_token_id: true,
                ..Quirks::default()
            },
            "endTurn",
        ),
        (Quirks::default(), "endTurn"),
    ];
    for (quirks, expected) in cases {
        let fake = FakeLlm::start(Auth::Any, vec![Turn::text("one, two").quirks(quirks)]).await;
        let mut params = simple(10);
        params.stop_sequences = Some(vec!["END".into(), "STOP".into()]);
        let r = sampler(&fake, None)
            .create_message("srv", params)
            .await
            .unwrap();
        assert_eq!(r.stop_reason.as_deref(), Some(expected), "{quirks:?}");
        assert_eq!(fake.requests()[0].body["stop"], json!(["END", "STOP"]));
    }
}
