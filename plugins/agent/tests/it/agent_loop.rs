//! The agent loop end to end: the fake model on one side, real MCP servers on the other
//! (Toolyard's demo server over Streamable HTTP through a `ClientRegistry`, and in memory),
//! asserting the exact conversation the model was sent.

use crate::fake::{Auth, FakeLlm, Quirks, Turn};
use crate::llm::fast_options;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolyard::client::{ClientBuilder, ClientEntry, ClientRegistry, ClientsConfig};
use toolyard::proto::{ElicitResult, Implementation};
use toolyard_agent::llm::{Endpoint, FinishReason, LlmClient, Message};
use toolyard_agent::{
    Agent, AgentError, AgentEvent, AgentHooks, AgentOptions, StopReason, ToolHandlers, Toolbox,
};

/// The demo server over Streamable HTTP on 127.0.0.1: its `/mcp` URL and the server task.
pub(crate) async fn demo_http() -> (String, tokio::task::JoinHandle<()>) {
    use toolyard::http::{HttpConfig, Security};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = toolyard_testkit::demo(toolyard::ServerBuilder::new("demo", "1"))
        .start()
        .await
        .unwrap();
    let config = HttpConfig {
        security: Security::loopback(),
        ..HttpConfig::default()
    };
    let app = toolyard::http::router(server, config).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), task)
}

async fn registry(url: &str) -> ClientRegistry {
    let config: ClientsConfig = toml::from_str(&format!(
        "[[clients]]\nname = \"demo\"\nurl = \"{url}/mcp\"\n"
    ))
    .unwrap();
    ClientRegistry::connect(&config.clients, Implementation::new("agent-test", "1"))
        .await
        .unwrap()
}

async fn memory_demo(name: &str) -> toolyard::client::Client {
    let server = toolyard_testkit::demo(toolyard::ServerBuilder::new(name, "1"))
        .start()
        .await
        .unwrap();
    ClientBuilder::new(Implementation::new("agent-test", "1"))
        .connect(toolyard::MemoryTransport::new(&server))
        .await
        .unwrap()
}

fn llm(fake: &FakeLlm) -> LlmClient {
    LlmClient::new(
        Endpoint::compatible(fake.base_url(), Some("sk-test".into())),
        fast_options(),
    )
    .unwrap()
}

/// Collects every event.
fn recorder() -> (AgentHooks, Arc<Mutex<Vec<AgentEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let hooks = AgentHooks {
        on_event: Some(Arc::new(move |e: &AgentEvent| {
            sink.lock().unwrap().push(e.clone())
        })),
        ..AgentHooks::default()
    };
    (hooks, events)
}

fn tool_names(request_body: &Value) -> Vec<String> {
    request_body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_calls_run_on_the_registry_and_results_go_back_in_order_with_their_ids() {
    let (url, _server) = demo_http().await;
    let registry = registry(&url).await;
    let fake = FakeLlm::start(
        Auth::Bearer("sk-test".into()),
        vec![
            Turn::calls(&[
                ("call_echo", "echo", r#"{"message":"hi"}"#),
                ("call_add", "add", r#"{"a":1,"b":2}"#),
            ]),
            Turn::text("Echoed hi; the sum is 3."),
        ],
    )
    .await;
    let toolbox = Toolbox::from_registry(&registry, &[]).await.unwrap();
    let mut options = AgentOptions::new("gpt-test");
    options.system_prompt = Some("Be brief.".into());
    let agent = Agent::new(llm(&fake), toolbox, options);
    let mut history = vec![Message::user("Echo hi and add 1 and 2")];
    let outcome = agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("Echoed hi; the sum is 3."));
    assert_eq!(outcome.turns, 2);
    assert_eq!(outcome.stop, StopReason::Finished(FinishReason::Stop));
    assert_eq!(outcome.usage.total_tokens, 30);

    let first = &fake.requests()[0].body;
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(first["tool_choice"], "auto");
    let names = tool_names(first);
    for expected in ["echo", "add", "slow", "ask_name", "summarize", "fail"] {
        assert!(names.contains(&expected.to_owned()), "{names:?}");
    }
    let echo = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "echo")
        .unwrap();
    assert_eq!(echo["type"], "function");
    assert_eq!(
        echo["function"]["parameters"]["properties"]["message"]["type"],
        "string"
    );
    assert!(echo["function"]["parameters"].get("$schema").is_none());

    assert_eq!(
        fake.messages(1),
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Echo hi and add 1 and 2"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_echo", "type": "function", "function": {"name": "echo", "arguments": "{\"message\":\"hi\"}"}},
                {"id": "call_add", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_echo", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_add", "content": "{\"sum\":3.0}"}
        ])
    );
    // The caller's history is the same conversation (without the system prompt) plus the answer.
    assert_eq!(history.len(), 5);
    assert_eq!(
        serde_json::to_value(&history[4]).unwrap(),
        json!({"role": "assistant", "content": "Echoed hi; the sum is 3."})
    );
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quirky_streams_and_a_stop_finish_with_calls_still_run_the_calls() {
    let (url, _server) = demo_http().await;
    let registry = registry(&url).await;
    let quirks = Quirks {
        omit_index: true,
        finish_reason_stop_with_tool_calls: true,
        azure_first_empty_choices: true,
        azure_trailing_filter_chunk: true,
        ..Quirks::default()
    };
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[("c1", "echo", r#"{"message":"a \"quoted\" caf\u00e9"}"#)])
                .quirks(quirks),
            Turn::text("done"),
        ],
    )
    .await;
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_registry(&registry, &[]).await.unwrap(),
        AgentOptions::new("m"),
    );
    let mut history = vec![Message::user("go")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        fake.messages(1)[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "a \"quoted\" café"})
    );
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_results_unknown_tools_and_bad_arguments_are_told_to_the_model() {
    let (url, _server) = demo_http().await;
    let registry = registry(&url).await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[
                ("c1", "fail", "{}"),
                ("c2", "no_such_tool", "{}"),
                ("c3", "echo", "{\"message\":"),
                ("c4", "echo", "[1]"),
            ]),
            Turn::text("sorry"),
        ],
    )
    .await;
    let (hooks, events) = recorder();
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_registry(&registry, &["demo/fail".into(), "echo".into()])
            .await
            .unwrap(),
        AgentOptions::new("m"),
    )
    .with_hooks(hooks);
    let mut history = vec![Message::user("go")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(tool_names(&fake.requests()[0].body), ["echo", "fail"]);
    let m = fake.messages(1);
    assert_eq!(m[2]["content"], "Error: this tool always fails");
    assert_eq!(
        m[3]["content"],
        "Error: there is no tool `no_such_tool`; the tools are: echo, fail"
    );
    assert!(m[4]["content"]
        .as_str()
        .unwrap()
        .starts_with("Error: the arguments are not valid JSON"));
    assert_eq!(
        m[5]["content"],
        "Error: the arguments must be a JSON object, not [1]"
    );
    let ids: Vec<_> = m.as_array().unwrap()[2..]
        .iter()
        .map(|t| t["tool_call_id"].clone())
        .collect();
    assert_eq!(ids, [json!("c1"), json!("c2"), json!("c3"), json!("c4")]);
    let errors = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolResult { is_error: true, .. }))
        .count();
    assert_eq!(errors, 4);
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_stops_at_max_turns() {
    let client = memory_demo("demo").await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[("c1", "echo", r#"{"message":"1"}"#)]),
            Turn::calls(&[("c2", "echo", r#"{"message":"2"}"#)]),
            Turn::text("never asked"),
        ],
    )
    .await;
    let mut options = AgentOptions::new("m");
    options.max_turns = 2;
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_clients(vec![("demo".into(), client)], &[])
            .await
            .unwrap(),
        options,
    );
    let mut history = vec![Message::user("loop")];
    let outcome = agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopReason::MaxTurns);
    assert_eq!(outcome.turns, 2);
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(history.len(), 5);
}

/// The demo server's `[[clients]]` entry; `protocol` pins a revision (else the client probes
/// and speaks the modern one, where questions come back as `InputRequiredResult`s).
pub(crate) fn entries(url: &str, protocol: Option<&str>) -> Vec<ClientEntry> {
    let pin = protocol
        .map(|p| format!("protocol = \"{p}\"\n"))
        .unwrap_or_default();
    let config: ClientsConfig = toml::from_str(&format!(
        "[[clients]]\nname = \"demo\"\nurl = \"{url}/mcp\"\n{pin}"
    ))
    .unwrap();
    config.clients
}

/// Both generations: the modern (multi-round-trip) one and a legacy session.
pub(crate) const GENERATIONS: [Option<&str>; 2] = [None, Some("2025-11-25")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_elicitation_goes_to_the_callers_handler_never_to_the_model() {
    let (url, _server) = demo_http().await;
    for protocol in GENERATIONS {
        let fake = FakeLlm::start(
            Auth::Any,
            vec![
                Turn::calls(&[("c1", "ask_name", "{}")]),
                Turn::text("Hi Ada"),
            ],
        )
        .await;
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let handlers = ToolHandlers {
            elicit: Some(toolyard::client::elicit_handler(move |p| {
                seen.lock().unwrap().push(p.message().to_owned());
                async move {
                    let mut c = serde_json::Map::new();
                    c.insert("name".into(), "Ada".into());
                    Ok(ElicitResult::accept(c))
                }
            })),
            ..ToolHandlers::default()
        };
        let toolbox = Toolbox::connect(
            &entries(&url, protocol),
            Implementation::new("agent-test", "1"),
            &handlers,
            &[],
        )
        .await
        .unwrap();
        let agent = Agent::new(llm(&fake), toolbox.clone(), AgentOptions::new("m"));
        let mut history = vec![Message::user("greet me")];
        agent
            .run(&mut history, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            *asked.lock().unwrap(),
            ["What is your name?"],
            "{protocol:?}"
        );
        assert_eq!(fake.messages(1)[2]["content"], "Hello, Ada!");
        let everything =
            serde_json::to_string(&fake.requests().iter().map(|r| &r.body).collect::<Vec<_>>())
                .unwrap();
        assert!(!everything.contains("What is your name?"));
        toolbox.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_elicitation_handler_the_tool_is_told_and_the_model_sees_its_answer() {
    let client = memory_demo("demo").await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::calls(&[("c1", "ask_name", "{}")]), Turn::text("ok")],
    )
    .await;
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_clients(vec![("demo".into(), client)], &[])
            .await
            .unwrap(),
        AgentOptions::new("m"),
    );
    let mut history = vec![Message::user("greet me")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    let text = fake.messages(1)[2]["content"].as_str().unwrap().to_owned();
    assert!(text.starts_with("Error"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_from_a_running_tool_is_reported_to_the_caller() {
    let (url, _server) = demo_http().await;
    let registry = registry(&url).await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[("c1", "slow", r#"{"steps":3,"delay_ms":30}"#)]),
            Turn::text("done"),
        ],
    )
    .await;
    let (hooks, events) = recorder();
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_registry(&registry, &[]).await.unwrap(),
        AgentOptions::new("m"),
    )
    .with_hooks(hooks);
    let mut history = vec![Message::user("count")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    let events = events.lock().unwrap().clone();
    let progress = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Progress { tool, .. } if tool == "slow"))
        .count();
    assert!(progress >= 2, "{events:?}");
    assert!(matches!(&events[0], AgentEvent::TurnStarted(1)));
    assert_eq!(fake.messages(1)[2]["content"], "done after 3 steps");
    registry.close().await;
}

async fn in_flight(url: &str) -> u64 {
    let text = reqwest::get(format!("{url}/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    body["inFlight"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_cancels_the_tool_calls_in_flight() {
    let (url, _server) = demo_http().await;
    let registry = registry(&url).await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![Turn::calls(&[(
            "c1",
            "slow",
            r#"{"steps":100,"delay_ms":100}"#,
        )])],
    )
    .await;
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_registry(&registry, &[]).await.unwrap(),
        AgentOptions::new("m"),
    );
    // The toolbox's `subscriptions/listen` stays in flight all along.
    let idle = in_flight(&url).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let probe = url.clone();
    tokio::spawn(async move {
        // Cancel once the call is running on the server.
        for _ in 0..100 {
            if in_flight(&probe).await > idle {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        trigger.cancel();
    });
    let started = Instant::now();
    let mut history = vec![Message::user("count a lot")];
    let r = agent.run(&mut history, &cancel).await;
    assert!(matches!(r, Err(AgentError::Cancelled)), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The conversation stays valid: the cancelled call has its result.
    assert_eq!(
        serde_json::to_value(&history[2]).unwrap(),
        json!({"role": "tool", "tool_call_id": "c1", "content": "Error: cancelled by the user"})
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_flight(&url).await > idle {
        assert!(Instant::now() < deadline, "the server still runs the call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_run_at_most_max_parallel_at_a_time() {
    let client = memory_demo("demo").await;
    let slow = r#"{"steps":2,"delay_ms":100}"#;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[
                ("a", "slow", slow),
                ("b", "slow", slow),
                ("c", "slow", slow),
                ("d", "slow", slow),
            ]),
            Turn::text("ok"),
        ],
    )
    .await;
    let mut options = AgentOptions::new("m");
    options.max_parallel_calls = 2;
    // Calls started and not finished, and the most there ever were.
    let running = Arc::new(Mutex::new((0usize, 0usize)));
    let seen = running.clone();
    let hooks = AgentHooks {
        on_event: Some(Arc::new(move |e: &AgentEvent| {
            let mut r = seen.lock().unwrap();
            match e {
                AgentEvent::ToolCall { .. } => {
                    r.0 += 1;
                    r.1 = r.1.max(r.0);
                }
                AgentEvent::ToolResult { .. } => r.0 -= 1,
                _ => {}
            }
        })),
        ..AgentHooks::default()
    };
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_clients(vec![("demo".into(), client)], &[])
            .await
            .unwrap(),
        options,
    )
    .with_hooks(hooks);
    let mut history = vec![Message::user("go")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        *running.lock().unwrap(),
        (0, 2),
        "two at a time, never more"
    );
    let ids: Vec<_> = fake.messages(1).as_array().unwrap()[2..]
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_caller_declines_is_not_made_and_the_model_is_told() {
    let client = memory_demo("demo").await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[
                ("c1", "echo", r#"{"message":"x"}"#),
                ("c2", "add", r#"{"a":1,"b":1}"#),
            ]),
            Turn::text("ok"),
        ],
    )
    .await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let hooks = AgentHooks {
        confirm: Some(Arc::new(move |p: toolyard_agent::PendingCall| {
            seen.lock()
                .unwrap()
                .push((p.server.clone(), p.tool.clone(), p.arguments.clone()));
            let yes = p.tool == "add";
            Box::pin(async move { yes })
        })),
        ..AgentHooks::default()
    };
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_clients(vec![("demo".into(), client)], &[])
            .await
            .unwrap(),
        AgentOptions::new("m"),
    )
    .with_hooks(hooks);
    let mut history = vec![Message::user("go")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        *asked.lock().unwrap(),
        [
            (
                "demo".to_owned(),
                "echo".to_owned(),
                json!({"message": "x"})
            ),
            ("demo".to_owned(), "add".to_owned(), json!({"a": 1, "b": 1}))
        ]
    );
    let m = fake.messages(1);
    assert_eq!(m[2]["content"], "Error: the user declined this tool call");
    assert_eq!(m[3]["content"], "{\"sum\":2.0}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_tool_name_on_two_servers_gets_two_function_names_that_route_back() {
    let (url, _server) = demo_http().await;
    let registry = registry(&url).await;
    let mut clients: Vec<(String, toolyard::client::Client)> =
        vec![("demo".into(), registry.get("demo").unwrap().clone())];
    clients.push(("other".into(), memory_demo("other").await));
    let toolbox = Toolbox::from_clients(clients, &["demo/echo".into(), "other/echo".into()])
        .await
        .unwrap();
    let functions: Vec<_> = toolbox
        .tools()
        .iter()
        .map(|t| (t.server.clone(), t.function.clone()))
        .collect();
    assert_eq!(functions.len(), 2);
    assert_ne!(functions[0].1, functions[1].1);
    assert!(
        functions
            .iter()
            .all(|(_, f)| f.starts_with("echo_") && f.len() == 13),
        "{functions:?}"
    );
    let other_echo = functions[1].1.clone();
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[("c1", &other_echo, r#"{"message":"routed"}"#)]),
            Turn::text("ok"),
        ],
    )
    .await;
    let (hooks, events) = recorder();
    let agent = Agent::new(llm(&fake), toolbox, AgentOptions::new("m")).with_hooks(hooks);
    let mut history = vec![Message::user("go")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(fake.messages(1)[2]["content"], "routed");
    let servers: Vec<_> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCall { server, tool, .. } => Some((server.clone(), tool.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(servers, [("other".to_owned(), "echo".to_owned())]);
    registry.close().await;
}

async fn many_tools(n: usize) -> toolyard::client::Client {
    let mut builder = toolyard::ServerBuilder::new("many", "1");
    for i in 0..n {
        let tool = toolyard::proto::Tool::new(format!("tool_{i}"), toolyard::empty_object_schema());
        builder = builder.try_tool(toolyard::ToolDef::new(
            tool,
            Arc::new(|_ctx, _args| {
                Box::pin(async { Ok(toolyard::proto::CallToolResult::text("x")) })
            }),
        ));
    }
    let server = builder.start().await.unwrap();
    ClientBuilder::new(Implementation::new("agent-test", "1"))
        .connect(toolyard::MemoryTransport::new(&server))
        .await
        .unwrap()
}

#[tokio::test]
async fn more_than_128_tools_is_an_error_that_names_the_allow_list() {
    let client = many_tools(130).await;
    let e = Toolbox::from_clients(vec![("many".into(), client.clone())], &[])
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            AgentError::TooManyTools {
                count: 130,
                limit: 128
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("allow-list ([agent] tools = "),
        "{e}"
    );
    let allow: Vec<String> = (0..100).map(|i| format!("many/tool_{i}")).collect();
    let toolbox = Toolbox::from_clients(vec![("many".into(), client)], &allow)
        .await
        .unwrap();
    assert_eq!(toolbox.tools().len(), 100);
}

#[tokio::test]
async fn an_allow_list_entry_that_matches_nothing_is_an_error() {
    let client = memory_demo("demo").await;
    let e = Toolbox::from_clients(vec![("demo".into(), client)], &["demo/ecoh".into()])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the allow-list entry `demo/ecoh` matches no tool"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_streaming_the_model_is_sent_the_same_conversation() {
    let client = memory_demo("demo").await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[("c1", "echo", r#"{"message":"x"}"#)]),
            Turn::text("ok"),
        ],
    )
    .await;
    let mut options = AgentOptions::new("m");
    options.stream = false;
    let (hooks, events) = recorder();
    let agent = Agent::new(
        llm(&fake),
        Toolbox::from_clients(vec![("demo".into(), client)], &[])
            .await
            .unwrap(),
        options,
    )
    .with_hooks(hooks);
    let mut history = vec![Message::user("go")];
    let outcome = agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("ok"));
    assert!(fake
        .requests()
        .iter()
        .all(|r| r.body.get("stream").is_none()));
    assert_eq!(
        fake.messages(1)[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "x"})
    );
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, AgentEvent::Text(t) if t == "ok")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_a_server_adds_are_offered_from_the_next_model_request() {
    let server = toolyard_testkit::demo(toolyard::ServerBuilder::new("demo", "1"))
        .start()
        .await
        .unwrap();
    // A legacy session: the server's list_changed notifications come unasked.
    let client = ClientBuilder::new(Implementation::new("agent-test", "1"))
        .protocol(toolyard::client::ProtocolChoice::Legacy(
            toolyard::proto::ProtocolVersion::V2025_11_25,
        ))
        .connect(toolyard::MemoryTransport::new(&server))
        .await
        .unwrap();
    let fake = FakeLlm::start(Auth::Any, vec![Turn::text("one"), Turn::text("two")]).await;
    let (hooks, events) = recorder();
    let toolbox = Toolbox::from_clients(vec![("demo".into(), client)], &[])
        .await
        .unwrap();
    let agent = Agent::new(llm(&fake), toolbox, AgentOptions::new("m")).with_hooks(hooks);
    let mut history = vec![Message::user("first")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert!(!tool_names(&fake.requests()[0].body).contains(&"late".to_owned()));
    let late = toolyard::proto::Tool::new("late", toolyard::empty_object_schema());
    server.add_tools(vec![toolyard::ToolDef::new(
        late,
        Arc::new(|_ctx, _args| Box::pin(async { Ok(toolyard::proto::CallToolResult::text("x")) })),
    )
    .unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !agent.toolbox().tools_changed() {
        assert!(Instant::now() < deadline, "no list_changed arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    history.push(Message::user("second"));
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert!(tool_names(&fake.requests()[1].body).contains(&"late".to_owned()));
    let count = agent.toolbox().tools().len();
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolsChanged(n) if *n == count)));
}

/// Serves `server` over Streamable HTTP on 127.0.0.1: its base URL and the task.
async fn serve_http(server: toolyard::Server) -> (String, tokio::task::JoinHandle<()>) {
    use toolyard::http::{HttpConfig, Security};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = HttpConfig {
        security: Security::loopback(),
        ..HttpConfig::default()
    };
    let app = toolyard::http::router(server, config).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), task)
}

/// A modern (2026-07-28) server sends `notifications/tools/list_changed` only on a
/// `subscriptions/listen` stream: the toolbox opens one, so a tool the server adds between
/// two prompts is offered from the next model request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_a_modern_server_adds_are_offered_from_the_next_model_request() {
    let server = toolyard_testkit::demo(toolyard::ServerBuilder::new("demo", "1"))
        .start()
        .await
        .unwrap();
    let (url, _task) = serve_http(server.clone()).await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::text("one"),
            Turn::calls(&[("c1", "late", "{}")]),
            Turn::text("two"),
        ],
    )
    .await;
    let (hooks, events) = recorder();
    let toolbox = Toolbox::connect(
        &entries(&url, None),
        Implementation::new("agent-test", "1"),
        &ToolHandlers::default(),
        &[],
    )
    .await
    .unwrap();
    let client = toolbox.client("demo").unwrap().clone();
    assert!(client.is_modern(), "the demo server speaks 2026-07-28");
    let agent = Agent::new(llm(&fake), toolbox, AgentOptions::new("m")).with_hooks(hooks);
    let mut history = vec![Message::user("first")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert!(!tool_names(&fake.requests()[0].body).contains(&"late".to_owned()));
    let late = toolyard::proto::Tool::new("late", toolyard::empty_object_schema());
    server.add_tools(vec![toolyard::ToolDef::new(
        late,
        Arc::new(|_ctx, _args| {
            Box::pin(async { Ok(toolyard::proto::CallToolResult::text("late answer")) })
        }),
    )
    .unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent.toolbox().tools_changed() {
        assert!(
            Instant::now() < deadline,
            "no list_changed arrived on the subscription"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    history.push(Message::user("second"));
    let outcome = agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.text.as_deref(), Some("two"));
    let requests = fake.requests();
    assert!(tool_names(&requests[1].body).contains(&"late".to_owned()));
    // The new tool is not only offered but routed to.
    assert_eq!(
        requests[2].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        &json!({"role": "tool", "tool_call_id": "c1", "content": "late answer"})
    );
    let count = agent.toolbox().tools().len();
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolsChanged(n) if *n == count)));
    agent.toolbox().close().await;
}

/// A server whose input schema shares a type through `$defs` (as Pydantic and schemars
/// write them): the model is sent the schema with the type inlined and no `$ref`, and the
/// call it makes reaches the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schemas_with_refs_reach_the_model_inlined() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "from": {"$ref": "#/$defs/Point", "description": "where to start"},
            "to": {"$ref": "#/$defs/Point"},
            "via": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
        },
        "required": ["from", "to"],
        "$defs": {
            "Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"]},
            "Tree": {"type": "object", "properties": {"at": {"$ref": "#/$defs/Point"},
                "next": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}
        }
    });
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    let route = toolyard::proto::Tool::new("route", schema);
    let server = toolyard::ServerBuilder::new("maps", "1")
        .tool(
            toolyard::ToolDef::new(
                route,
                Arc::new(|_ctx, args| {
                    Box::pin(async move {
                        let args = args.into_value();
                        Ok(toolyard::proto::CallToolResult::text(format!(
                            "from {} to {}",
                            args["from"]["x"], args["to"]["x"]
                        )))
                    })
                }),
            )
            .unwrap(),
        )
        .start()
        .await
        .unwrap();
    let client = ClientBuilder::new(Implementation::new("agent-test", "1"))
        .connect(toolyard::MemoryTransport::new(&server))
        .await
        .unwrap();
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[(
                "c1",
                "route",
                r#"{"from":{"x":1,"y":2},"to":{"x":3,"y":4}}"#,
            )]),
            Turn::text("done"),
        ],
    )
    .await;
    let toolbox = Toolbox::from_clients(vec![("maps".into(), client)], &[])
        .await
        .unwrap();
    let agent = Agent::new(llm(&fake), toolbox, AgentOptions::new("m"));
    let mut history = vec![Message::user("route me")];
    agent
        .run(&mut history, &CancellationToken::new())
        .await
        .unwrap();
    let requests = fake.requests();
    let parameters = &requests[0].body["tools"][0]["function"]["parameters"];
    let point = json!({"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"]});
    let mut from = point.clone();
    from["description"] = json!("where to start");
    assert_eq!(
        parameters,
        &json!({
            "type": "object",
            "properties": {
                "from": from,
                "to": point,
                // The recursive type is expanded once; its recurrence accepts anything.
                "via": {"type": "array", "items": {"type": "object", "properties": {
                    "at": point, "next": {"type": "array", "items": {}}}}}
            },
            "required": ["from", "to"]
        })
    );
    assert!(!parameters.to_string().contains("$ref"));
    assert_eq!(
        requests[1].body["messages"][2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "from 1 to 3"})
    );
}

/// What an observer was told: each operation's span name, the parent it was started under,
/// and how it ended.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    context: String,
    parent: Option<String>,
    error_type: Option<String>,
    finish_reasons: Vec<String>,
    input_tokens: Option<u64>,
}

/// An observer that records (a stand-in for an OpenTelemetry tracer, which the binary's
/// system test `agent::agent_with_an_otlp_endpoint_exports_...` uses for real).
#[derive(Default)]
struct Recording(Arc<Mutex<Vec<Seen>>>);

struct RecordedSpan(Arc<Mutex<Vec<Seen>>>, Seen);

impl toolyard_agent::GenAiObserver for Recording {
    fn start(
        &self,
        operation: &toolyard_agent::Operation<'_>,
        parent: Option<&toolyard_agent::TraceContext>,
    ) -> Box<dyn toolyard_agent::GenAiSpan> {
        let n = self.0.lock().unwrap().len() + 1;
        Box::new(RecordedSpan(
            self.0.clone(),
            Seen {
                name: operation.span_name(),
                context: format!("00-{:032x}-{n:016x}-01", 7),
                parent: parent.map(|p| p.traceparent.clone()),
                ..Seen::default()
            },
        ))
    }
}

impl toolyard_agent::GenAiSpan for RecordedSpan {
    fn context(&self) -> Option<toolyard_agent::TraceContext> {
        Some(toolyard_agent::TraceContext {
            traceparent: self.1.context.clone(),
            tracestate: None,
        })
    }

    fn finish(self: Box<Self>, outcome: &toolyard_agent::Outcome<'_>) {
        let RecordedSpan(sink, mut seen) = *self;
        seen.error_type = outcome.error_type.map(str::to_owned);
        seen.finish_reasons = outcome
            .finish_reasons
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        seen.input_tokens = outcome.usage.map(|u| u.prompt_tokens);
        sink.lock().unwrap().push(seen);
    }
}

/// With an observer, a run is an `invoke_agent` span that parents each model request's
/// `chat` span (whose context the HTTP request carries) and each tool call's `execute_tool`
/// span; a tool's `isError` result is `tool_error`, and the chats carry their finish
/// reasons and usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_the_run_its_chats_and_its_tool_calls_as_one_tree() {
    let client = memory_demo("demo").await;
    let fake = FakeLlm::start(
        Auth::Any,
        vec![
            Turn::calls(&[("c1", "echo", r#"{"message":"hi"}"#), ("c2", "fail", "{}")]),
            Turn::text("done"),
        ],
    )
    .await;
    let recording = Recording::default();
    let seen = recording.0.clone();
    let llm = llm(&fake).with_observer(Arc::new(recording));
    let toolbox = Toolbox::from_clients(vec![("demo".into(), client)], &[])
        .await
        .unwrap();
    let agent = Agent::new(llm, toolbox, AgentOptions::new("gpt-test"));
    agent
        .run(&mut vec![Message::user("go")], &CancellationToken::new())
        .await
        .unwrap();
    let mut seen = seen.lock().unwrap().clone();
    // In the order they ended (the two calls run at once: either may end first).
    seen[1..3].sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = seen.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chat gpt-test",
            "execute_tool echo",
            "execute_tool fail",
            "chat gpt-test",
            "invoke_agent toolyard"
        ]
    );
    let run = seen.last().unwrap();
    assert_eq!(run.parent, None);
    assert_eq!(run.finish_reasons, ["stop"]);
    assert_eq!(run.input_tokens, Some(20), "both chats' tokens");
    for s in &seen[..4] {
        assert_eq!(s.parent.as_ref(), Some(&run.context), "{s:?}");
    }
    assert_eq!(seen[0].finish_reasons, ["tool_calls"]);
    assert_eq!(seen[0].input_tokens, Some(10));
    assert_eq!(seen[1].error_type, None);
    assert_eq!(seen[2].error_type.as_deref(), Some("tool_error"));
    assert_eq!(seen[3].finish_reasons, ["stop"]);
    // Each model request carries its `chat` span's context, for an instrumented model
    // server or LLM gateway to join the trace.
    let sent: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| {
            r.headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(sent, [seen[0].context.clone(), seen[3].context.clone()]);
}

/// A modern server written out on the wire that announces `tools.listChanged` but refuses
/// `subscriptions/listen` (-32601, as a server without subscriptions answers): the toolbox
/// starts at once with the server's tools, without following its changes, instead of
/// waiting out the request timeout for an acknowledgement that cannot come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_subscriptions_listen_does_not_stall_the_toolbox() {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let listens = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = listens.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |body: String| {
            let seen = seen.clone();
            async move {
                let v: Value = serde_json::from_str(&body).unwrap();
                let id = v["id"].clone();
                let (status, answer) = match v["method"].as_str() {
                    Some("server/discover") => (
                        StatusCode::OK,
                        json!({"result": {
                            "supportedVersions": ["2026-07-28"],
                            "capabilities": {"tools": {"listChanged": true}},
                        }}),
                    ),
                    Some("tools/list") => (
                        StatusCode::OK,
                        json!({"result": {"tools": [{
                            "name": "only", "inputSchema": {"type": "object"}
                        }]}}),
                    ),
                    method => {
                        if method == Some("subscriptions/listen") {
                            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        (
                            StatusCode::NOT_FOUND,
                            json!({"error": {"code": -32601, "message": "Method not found"}}),
                        )
                    }
                };
                let mut answer = answer;
                answer["jsonrpc"] = json!("2.0");
                answer["id"] = id;
                (
                    status,
                    [("content-type", "application/json")],
                    answer.to_string(),
                )
                    .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = ClientBuilder::new(Implementation::new("agent-test", "1"))
        .request_timeout(Duration::from_secs(600))
        .connect(toolyard::client::StreamableHttpTransport::new(format!(
            "http://{addr}/mcp"
        )))
        .await
        .unwrap();
    assert!(client.is_modern());
    let toolbox = tokio::time::timeout(
        Duration::from_secs(10),
        Toolbox::from_clients(vec![("raw".into(), client)], &[]),
    )
    .await
    .expect("the toolbox waited for an acknowledgement the refusal ruled out")
    .unwrap();
    assert_eq!(
        listens.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the toolbox asked to follow the announced changes"
    );
    let names: Vec<_> = toolbox
        .tools()
        .iter()
        .map(|t| t.tool.name.as_str())
        .collect();
    assert_eq!(names, ["only"]);
    assert!(!toolbox.tools_changed());
}
