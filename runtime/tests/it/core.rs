//! The server core through the in-memory transport: concurrency, panics, supervision,
//! cancellation, multi-round-trip requests, subscriptions and middleware.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolyard::proto::{ElicitRequestParams, JsonObject};
use toolyard::{tool_fn, Layer, Outcome, RequestContext, RequestInfo, ServerBuilder};
use toolyard_testkit::RawClient;

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

fn meta(caps: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":caps})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_calls_on_one_connection_run_concurrently_and_a_panic_fails_only_its_caller() {
    let barrier = Arc::new(tokio::sync::Barrier::new(100));
    let b = barrier.clone();
    let server = ServerBuilder::new("t", "0")
        .try_tool(tool_fn(
            "wait",
            "Waits for 99 others",
            move |_c, _a: NoArgs| {
                let b = b.clone();
                async move {
                    b.wait().await;
                    Ok("released")
                }
            },
        ))
        .try_tool(tool_fn("boom", "Panics", |_c, _a: NoArgs| async move {
            if true {
                panic!("tool exploded");
            }
            Ok("unreachable")
        }))
        .start()
        .await
        .unwrap();
    let client = Arc::new(RawClient::connect(&server).await.unwrap());
    client.initialize(json!({})).await.unwrap();
    let mut calls = Vec::new();
    for _ in 0..100 {
        let c = client.clone();
        calls.push(tokio::spawn(async move {
            c.request("tools/call", json!({"name":"wait"})).await
        }));
    }
    let boom = client.request("tools/call", json!({"name":"boom"})).await;
    match boom {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => {
            assert_eq!(e.code, -32603);
            assert!(e.message.contains("tool exploded"), "{e}");
        }
        other => panic!("a panicking tool must give its caller an error, got {other:?}"),
    }
    for c in calls {
        let r = c.await.unwrap().unwrap();
        assert_eq!(r["content"][0]["text"], "released");
    }
}

/// Regression: registration was a message to the handler actor, so a gateway that added a
/// source's tools and routed a call to them at once could get "Unknown tool".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_added_at_runtime_is_callable_as_soon_as_add_tools_returns() {
    let server = ServerBuilder::new("t", "0").start().await.unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    for i in 0..200 {
        let name = format!("added_{i}");
        server.add_tools(vec![tool_fn(&name, "x", |_c, _a: NoArgs| async {
            Ok("here")
        })
        .unwrap()]);
        let r = client
            .request("tools/call", json!({"name": name, "arguments": {}}))
            .await
            .unwrap();
        assert_eq!(r["content"][0]["text"], "here", "call {i}");
        server.remove_tools(vec![name.clone()]);
        let gone = client
            .request("tools/call", json!({"name": name, "arguments": {}}))
            .await;
        assert!(
            gone.is_err() || gone.unwrap()["isError"] == true,
            "call {i} after removal"
        );
    }
}

#[tokio::test]
async fn a_crashed_handler_actor_is_restarted_and_requests_go_on() {
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    server.crash_handler("tools");
    // Whatever races the crash gets an answer (an error or a result), never silence.
    for i in 0..20 {
        let r = client
            .request(
                "tools/call",
                json!({"name":"echo","arguments":{"message":i.to_string()}}),
            )
            .await;
        if i >= 10 {
            assert_eq!(r.unwrap()["content"][0]["text"], i.to_string());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let list = client.request("tools/list", json!({})).await.unwrap();
    assert!(
        list["tools"].as_array().unwrap().len() >= 5,
        "registry survives the restart"
    );
}

#[tokio::test]
async fn cancelled_notification_stops_the_tool_and_no_response_is_sent() {
    let stopped = Arc::new(AtomicUsize::new(0));
    let s = stopped.clone();
    let server = ServerBuilder::new("t", "0")
        .try_tool(tool_fn(
            "hang",
            "Hangs until cancelled",
            move |ctx: RequestContext, _a: NoArgs| {
                let s = s.clone();
                async move {
                    struct Guard(Arc<AtomicUsize>);
                    impl Drop for Guard {
                        fn drop(&mut self) {
                            self.0.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let _g = Guard(s);
                    ctx.cancelled().await;
                    Ok("cancelled")
                }
            },
        ))
        .try_tool(tool_fn("ok", "Answers", |_c, _a: NoArgs| async {
            Ok("ok")
        }))
        .start()
        .await
        .unwrap();
    let client = Arc::new(RawClient::connect(&server).await.unwrap());
    client.initialize(json!({})).await.unwrap();
    let c = client.clone();
    let hung = tokio::spawn(async move {
        c.request_with_id(
            toolyard::proto::RequestId::Number(777),
            "tools/call",
            json!({"name":"hang"}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    client
        .notify(
            "notifications/cancelled",
            json!({"requestId": 777, "reason": "user"}),
        )
        .unwrap();
    for _ in 0..50 {
        if stopped.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        stopped.load(Ordering::SeqCst),
        1,
        "the tool's future was dropped"
    );
    assert_eq!(
        client
            .request("tools/call", json!({"name":"ok"}))
            .await
            .unwrap()["content"][0]["text"],
        "ok"
    );
    hung.abort();
}

#[tokio::test]
async fn modern_elicitation_takes_rounds_and_rejects_tampered_state() {
    let server = ServerBuilder::new("t", "0")
        .try_tool(tool_fn(
            "two_questions",
            "Asks twice",
            |ctx: RequestContext, _a: NoArgs| async move {
                let schema: JsonObject = serde_json::from_value(
                    json!({"type":"object","properties":{"v":{"type":"string"}}}),
                )
                .unwrap();
                let a = ctx
                    .elicit("first", ElicitRequestParams::form("first?", schema.clone()))
                    .await?;
                let b = ctx
                    .elicit("second", ElicitRequestParams::form("second?", schema))
                    .await?;
                Ok(format!(
                    "{} {}",
                    a.content.unwrap()["v"],
                    b.content.unwrap()["v"]
                ))
            },
        ))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    let m = meta(json!({"elicitation":{}}));
    let r1 = client
        .request("tools/call", json!({"_meta":m,"name":"two_questions"}))
        .await
        .unwrap();
    assert_eq!(r1["resultType"], "input_required");
    assert_eq!(r1["inputRequests"]["first"]["method"], "elicitation/create");
    let state1 = r1["requestState"].as_str().unwrap().to_owned();

    // Tampered state is a JSON-RPC error.
    let bad = client
        .request(
            "tools/call",
            json!({"_meta":m,"name":"two_questions","requestState": format!("{state1}x"),
            "inputResponses":{"first":{"action":"accept","content":{"v":"a"}}}}),
        )
        .await;
    assert!(
        matches!(bad, Err(toolyard_testkit::RawClientError::Rpc(ref e)) if e.code == -32602),
        "{bad:?}"
    );

    let r2 = client
        .request(
            "tools/call",
            json!({"_meta":m,"name":"two_questions","requestState":state1,
            "inputResponses":{"first":{"action":"accept","content":{"v":"a"}}}}),
        )
        .await
        .unwrap();
    assert_eq!(r2["resultType"], "input_required");
    assert!(r2["inputRequests"].get("second").is_some(), "{r2}");
    let r3 = client
        .request(
            "tools/call",
            json!({"_meta":m,"name":"two_questions","requestState":r2["requestState"],
            "inputResponses":{"second":{"action":"accept","content":{"v":"b"}}}}),
        )
        .await
        .unwrap();
    assert_eq!(r3["resultType"], "complete");
    assert_eq!(r3["content"][0]["text"], "\"a\" \"b\"");

    // Without the capability: -32021 naming it.
    let e = client
        .request(
            "tools/call",
            json!({"_meta":meta(json!({})),"name":"two_questions"}),
        )
        .await;
    match e {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => {
            assert_eq!(e.code, -32021);
            assert_eq!(
                e.data.unwrap()["requiredCapabilities"],
                json!({"elicitation":{}})
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn legacy_elicitation_is_a_request_to_the_client() {
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .start()
        .await
        .unwrap();
    let client = Arc::new(RawClient::connect(&server).await.unwrap());
    client.initialize(json!({"elicitation":{}})).await.unwrap();
    let c = client.clone();
    let call =
        tokio::spawn(async move { c.request("tools/call", json!({"name":"ask_name"})).await });
    let req = client.next_request().await.expect("elicitation/create");
    assert_eq!(req["method"], "elicitation/create");
    client.respond(
        &req["id"],
        json!({"action":"accept","content":{"name":"Ada"}}),
    );
    let r = call.await.unwrap().unwrap();
    assert_eq!(r["content"][0]["text"], "Hello, Ada!");
}

#[tokio::test]
async fn listen_acknowledges_first_and_tags_only_requested_notifications() {
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .start()
        .await
        .unwrap();
    let client = Arc::new(RawClient::connect(&server).await.unwrap());
    let c = client.clone();
    let _listen = tokio::spawn(async move {
        c.request_with_id(
            "listen-1".into(),
            "subscriptions/listen",
            json!({"_meta":meta(json!({})),"notifications":{"toolsListChanged":true}}),
        )
        .await
    });
    let ack = client.next_notification().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
    server.publish(toolyard::Event::PromptsChanged);
    server.publish(toolyard::Event::ToolsChanged);
    let n = client.next_notification().await.unwrap();
    assert_eq!(
        n["method"], "notifications/tools/list_changed",
        "prompts were not requested"
    );
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
}

#[tokio::test]
async fn legacy_subscribe_delivers_resource_updates_and_progress_flows() {
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client
        .request("resources/subscribe", json!({"uri":"demo://readme"}))
        .await
        .unwrap();
    server.notify_resource_updated("demo://other");
    server.notify_resource_updated("demo://readme");
    let n = client.next_notification().await.unwrap();
    assert_eq!(n["method"], "notifications/resources/updated");
    assert_eq!(n["params"]["uri"], "demo://readme");
    client
        .request("logging/setLevel", json!({"level":"info"}))
        .await
        .unwrap();
    let r = client
        .request("tools/call", json!({"name":"slow","arguments":{"steps":3,"delay_ms":1},"_meta":{"progressToken":"p"}}))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "done after 3 steps");
    let (mut progress, mut logs) = (0, 0);
    while let Ok(Some(n)) =
        tokio::time::timeout(Duration::from_millis(200), client.next_notification()).await
    {
        match n["method"].as_str() {
            Some("notifications/progress") => progress += 1,
            Some("notifications/message") => logs += 1,
            _ => {}
        }
    }
    assert_eq!((progress, logs), (3, 3));
}

struct Counting(Arc<AtomicUsize>, Arc<std::sync::Mutex<Vec<Outcome>>>);

struct Done(Arc<std::sync::Mutex<Vec<Outcome>>>);

impl toolyard::Completion for Done {
    fn finish(self: Box<Self>, _info: &RequestInfo, outcome: &Outcome) {
        self.0.lock().unwrap().push(outcome.clone());
    }
}

impl Layer for Counting {
    fn start(&self, info: &RequestInfo) -> Result<toolyard::Observe, toolyard::proto::ErrorObject> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if &*info.method == "prompts/list" {
            return Err(toolyard::proto::ErrorObject::new(
                -32000,
                "forbidden by layer",
            ));
        }
        Ok(toolyard::Observe::Completion(Box::new(Done(
            self.1.clone(),
        ))))
    }
}

#[tokio::test]
async fn a_layer_sees_every_request_and_its_outcome_and_may_reject() {
    let seen = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .layer(Arc::new(Counting(seen.clone(), outcomes.clone())))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client
        .request(
            "tools/call",
            json!({"name":"echo","arguments":{"message":"x"}}),
        )
        .await
        .unwrap();
    client
        .request("tools/call", json!({"name":"fail"}))
        .await
        .unwrap();
    assert!(client.request("prompts/list", json!({})).await.is_err());
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(
        *outcomes.lock().unwrap(),
        vec![Outcome::Ok, Outcome::ToolError]
    );
}

/// Counts only the requests of the methods it observes.
struct ListingsOnly(Arc<AtomicUsize>);

impl Layer for ListingsOnly {
    fn observes(&self, method: &str) -> bool {
        method.ends_with("/list")
    }

    fn start(&self, info: &RequestInfo) -> Result<toolyard::Observe, toolyard::proto::ErrorObject> {
        assert!(
            info.method.ends_with("/list"),
            "started for {}",
            info.method
        );
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(toolyard::Observe::Nothing)
    }
}

#[tokio::test]
async fn a_layer_is_started_only_for_the_methods_it_observes() {
    let listings = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .layer(Arc::new(ListingsOnly(listings.clone())))
        .layer(Arc::new(Counting(seen.clone(), outcomes.clone())))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client
        .request(
            "tools/call",
            json!({"name":"echo","arguments":{"message":"x"}}),
        )
        .await
        .unwrap();
    client.request("tools/list", json!({})).await.unwrap();
    assert_eq!(listings.load(Ordering::SeqCst), 1);
    // A layer observing everything beside it still sees every request.
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn tool_events_publish_each_calls_outcome_and_duration_and_readiness_follows_the_lifecycle() {
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .tool_events()
        .start()
        .await
        .unwrap();
    let mut events = server.lifecycle().subscribe();
    assert!(server.lifecycle().readiness().ready, "ready once started");
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client
        .request(
            "tools/call",
            json!({"name":"echo","arguments":{"message":"x"}}),
        )
        .await
        .unwrap();
    client
        .request("tools/call", json!({"name":"fail"}))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
            Ok(Ok(toolyard::LifecycleEvent::ToolInvoked { tool, outcome, .. })) => {
                seen.push((tool, outcome))
            }
            Ok(Ok(_)) => {}
            other => panic!("no tool event: {other:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            ("echo".to_owned(), Outcome::Ok),
            ("fail".to_owned(), Outcome::ToolError)
        ]
    );
    server.shutdown();
    assert!(matches!(
        events.recv().await,
        Ok(toolyard::LifecycleEvent::Stopping)
    ));
    assert!(
        !server.lifecycle().readiness().ready,
        "not ready once stopping"
    );
}

/// Regression (issue 13): a completer that knows there are more values than it returns
/// (the gateway relaying a source's answer) is answered with its `total` and `hasMore`, not
/// with the count of the values it returned; more than 100 values are capped, and say so.
#[tokio::test]
async fn a_completers_total_and_has_more_reach_the_answer_and_100_values_are_the_cap() {
    let server = ServerBuilder::new("t", "0")
        .completer(
            toolyard::CompletionTarget::Prompt("p".into(), "few".into()),
            Arc::new(|_, _, _| {
                Box::pin(async {
                    toolyard::Completions {
                        values: vec!["a".into(), "b".into()],
                        total: Some(500),
                        has_more: Some(true),
                    }
                })
            }),
        )
        .completer(
            toolyard::CompletionTarget::Prompt("p".into(), "many".into()),
            Arc::new(|_, _, _| Box::pin(async { (0..150).map(|i| i.to_string()).collect() })),
        )
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let few = client
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "few", "value": ""}}),
        )
        .await
        .unwrap();
    assert_eq!(few["completion"]["values"], json!(["a", "b"]));
    assert_eq!(few["completion"]["total"], 500);
    assert_eq!(few["completion"]["hasMore"], true);
    let many = client
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "many", "value": ""}}),
        )
        .await
        .unwrap();
    assert_eq!(many["completion"]["values"].as_array().unwrap().len(), 100);
    assert_eq!(many["completion"]["total"], 150);
    assert_eq!(many["completion"]["hasMore"], true);
}

#[tokio::test]
async fn lists_paginate_with_opaque_cursors() {
    let mut b = ServerBuilder::new("t", "0").list_settings(toolyard::ListSettings {
        page_size: 2,
        ..Default::default()
    });
    for i in 0..5 {
        b = b.try_tool(tool_fn(
            &format!("t{i}"),
            "numbered",
            |_c, _a: NoArgs| async { Ok("x") },
        ));
    }
    let server = b.start().await.unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let r = client
            .request("tools/list", json!({"cursor": cursor}))
            .await
            .unwrap();
        names.extend(
            r["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned()),
        );
        match r["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["t0", "t1", "t2", "t3", "t4"]);
    let bad = client
        .request("tools/list", json!({"cursor":"not-a-cursor"}))
        .await;
    assert!(matches!(bad, Err(toolyard_testkit::RawClientError::Rpc(ref e)) if e.code == -32602));
}

/// MCP has no positional params: a request whose `params` is a JSON array is -32602 saying
/// params must be an object, for every method the server knows (and custom and unknown ones),
/// in legacy sessions of two revisions and as modern requests (which then have no `_meta`:
/// refused for their params, not as legacy requests before `initialize`); the connection goes
/// on. serde's derived struct deserializers read an array by position, so before this was
/// refused a positional `tools/call` was served.
#[tokio::test]
async fn positional_params_are_invalid_params_for_every_method_in_both_generations() {
    use toolyard::proto::method::CLIENT_REQUESTS;
    use toolyard_testkit::RawClientError;

    let custom: toolyard::MethodFn = Arc::new(|_ctx, params| {
        Box::pin(async move {
            let params = params.map(|p| p.get().to_owned());
            Ok(json!({ "params": params }))
        })
    });
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .in_memory_tasks()
        .method("x/custom", custom)
        .start()
        .await
        .unwrap();
    let mut methods: Vec<&str> = CLIENT_REQUESTS.iter().map(|s| s.name).collect();
    methods.extend(["x/custom", "no/such/method"]);
    for m in [
        "tools/call",
        "tools/list",
        "resources/read",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "initialize",
        "ping",
        "tasks/get",
        "tasks/list",
        "tasks/cancel",
        "server/discover",
        "subscriptions/listen",
    ] {
        assert!(methods.contains(&m), "{m} is not in the method table");
    }

    async fn refused(client: &RawClient, method: &str, params: Value, what: &str) {
        match client.request(method, params).await {
            Err(RawClientError::Rpc(e)) => {
                assert_eq!(e.code, -32602, "{what} {method}: {e}");
                assert!(
                    e.message.contains("must be an object"),
                    "{what} {method}: {e}"
                );
            }
            other => panic!("{what} {method}: positional params were accepted: {other:?}"),
        }
    }

    let modern = meta(json!({}));
    let echo = |m: Option<&Value>| {
        let mut p = json!({"name":"echo","arguments":{"message":"still here"}});
        if let Some(m) = m {
            p["_meta"] = m.clone();
        }
        p
    };

    // Legacy sessions: before and after initialize.
    for version in ["2025-06-18", "2025-11-25"] {
        let client = RawClient::connect(&server).await.unwrap();
        refused(
            &client,
            "initialize",
            json!([version, {}, {"name":"t","version":"0"}]),
            version,
        )
        .await;
        refused(&client, "ping", json!([]), version).await;
        let init = client
            .request(
                "initialize",
                json!({"protocolVersion":version,"capabilities":{},"clientInfo":{"name":"t","version":"0"}}),
            )
            .await
            .unwrap();
        assert_eq!(init["protocolVersion"], version);
        client
            .notify("notifications/initialized", json!({}))
            .unwrap();
        for method in &methods {
            refused(&client, method, json!(["echo", {"message":"m"}]), version).await;
            let r = client.request("tools/call", echo(None)).await.unwrap();
            assert_eq!(
                r["content"][0]["text"], "still here",
                "{version} after {method}"
            );
        }
        let r = client.request("x/custom", json!({"a":1})).await.unwrap();
        assert_eq!(r["params"], r#"{"a":1}"#);
    }

    // Modern requests on a connection that never initializes.
    let client = RawClient::connect(&server).await.unwrap();
    for method in &methods {
        refused(
            &client,
            method,
            json!([{"_meta": modern}, "echo", {"message":"m"}]),
            "2026-07-28",
        )
        .await;
        let r = client
            .request("tools/call", echo(Some(&modern)))
            .await
            .unwrap();
        assert_eq!(r["resultType"], "complete", "after {method}");
        assert_eq!(r["content"][0]["text"], "still here", "after {method}");
    }
    // The positional `initialize` did not initialize: a legacy request is still refused as
    // coming before `initialize`.
    match client.request("tools/list", json!({})).await {
        Err(RawClientError::Rpc(e)) => {
            assert_eq!(e.code, -32602);
            assert!(e.message.contains("before `initialize`"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

/// A transport that hands requests in without `jsonrpc::parse` (the public transport API)
/// gets the same refusal: `Server::serve_stateless` refuses positional params for every
/// method (custom and `server/discover` included), and a legacy session's
/// `ConnectionHandle::deliver_request` (launched directly through the session's view, whose
/// edge reads the params) refuses them too, then serves the next request.
#[tokio::test]
async fn positional_params_handed_in_unparsed_through_the_transport_api_are_invalid_params() {
    use serde_json::value::RawValue;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;
    use toolyard::proto::jsonrpc::Request;
    use toolyard::proto::{RequestId, RequestMeta};
    use toolyard::transport::{Delivery, Sink};

    let custom: toolyard::MethodFn =
        Arc::new(|_ctx, _params| Box::pin(async move { Ok(json!({"served": true})) }));
    let server = toolyard_testkit::demo(ServerBuilder::new("t", "0"))
        .method("x/custom", custom)
        .start()
        .await
        .unwrap();
    let request = |id: i64, method: &str, params: &str| Request {
        id: RequestId::Number(id),
        method: method.to_owned(),
        params: Some(RawValue::from_string(params.to_owned()).unwrap()),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let delivery = |track: bool| Delivery {
        sink: Sink::channel(tx.clone()),
        cancel: CancellationToken::new(),
        track,
        principal: None,
        peer: None,
        transport_trace: None,
    };
    async fn next(rx: &mut mpsc::UnboundedReceiver<Vec<u8>>, id: i64) -> Value {
        loop {
            let bytes = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("an answer within 10 s")
                .expect("the sink is open");
            let m: Value = serde_json::from_slice(&bytes).unwrap();
            if m["id"] == id && m.get("method").is_none() {
                return m;
            }
        }
    }
    fn assert_refused(m: &Value) {
        assert_eq!(m["error"]["code"], -32602, "{m}");
        assert!(
            m["error"]["message"]
                .as_str()
                .is_some_and(|s| s.contains("must be an object")),
            "{m}"
        );
    }

    let modern: RequestMeta = serde_json::from_value(meta(json!({}))).unwrap();
    for (id, method) in [(1, "tools/call"), (2, "x/custom"), (3, "server/discover")] {
        let req = request(id, method, r#"["echo",{"message":"m"}]"#);
        server.serve_stateless(req, modern.clone(), delivery(false));
        assert_refused(&next(&mut rx, id).await);
    }

    let handle = server.connect(Sink::channel(tx.clone())).await.unwrap();
    handle.receive(
        json!({"jsonrpc":"2.0","id":10,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        next(&mut rx, 10).await["result"]["protocolVersion"],
        "2025-06-18"
    );
    handle.receive(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    for (id, method) in [(11, "tools/call"), (12, "tools/list"), (13, "x/custom")] {
        let req = request(id, method, r#"["echo",{"message":"m"}]"#);
        assert!(handle.deliver_request(req, delivery(true)));
        assert_refused(&next(&mut rx, id).await);
    }
    let echo = request(
        14,
        "tools/call",
        r#"{"name":"echo","arguments":{"message":"after"}}"#,
    );
    assert!(handle.deliver_request(echo, delivery(true)));
    let r = next(&mut rx, 14).await;
    assert_eq!(r["result"]["content"][0]["text"], "after", "{r}");
}

/// An empty state secret (`TOOLYARD_STATE_SECRET=` in a deployment's environment) is not a
/// key: its digest is public, and anyone could seal `requestState` the server trusts. It is
/// ignored: the server seals with a random key, as with none (a NATS worker or gateway then
/// takes the one its peers share on the bus).
#[tokio::test]
async fn an_empty_state_secret_is_no_key() {
    let ttl = Duration::from_secs(600);
    let empty = ServerBuilder::new("t", "0")
        .state_secret("", ttl)
        .start()
        .await
        .unwrap();
    assert!(empty.state_key_is_random());
    let given = ServerBuilder::new("t", "0")
        .state_secret("s3cret", ttl)
        .start()
        .await
        .unwrap();
    assert!(!given.state_key_is_random());
}

/// Requests served without a connection (`Server::serve_stateless` and its kin), their
/// answers collected on one channel.
struct Stateless {
    tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    rx: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
}

impl Stateless {
    fn new() -> Stateless {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Stateless { tx, rx }
    }

    fn delivery(&self) -> toolyard::transport::Delivery {
        toolyard::transport::Delivery {
            sink: toolyard::transport::Sink::channel(self.tx.clone()),
            cancel: tokio_util::sync::CancellationToken::new(),
            track: false,
            principal: None,
            peer: None,
            transport_trace: None,
        }
    }

    /// A `tools/call` with these params.
    fn call(id: i64, params: &Value) -> toolyard::proto::jsonrpc::Request {
        toolyard::proto::jsonrpc::Request {
            id: toolyard::proto::RequestId::Number(id),
            method: "tools/call".to_owned(),
            params: Some(serde_json::value::RawValue::from_string(params.to_string()).unwrap()),
        }
    }

    async fn answer(&mut self) -> Value {
        let bytes = tokio::time::timeout(Duration::from_secs(10), self.rx.recv())
            .await
            .expect("an answer within 10 s")
            .expect("the sink is open");
        serde_json::from_slice(&bytes).unwrap()
    }
}

/// A request served as the body of a task held elsewhere (a durable NATS job) runs its
/// tool as an ordinary call: a tool that runs only as a task, which a plain 2026-07-28 call
/// without the tasks extension is refused (-32021), runs and answers, and even a caller
/// declaring the extension gets its result, not a task of this server's.
#[tokio::test]
async fn a_task_body_runs_a_task_only_tool_as_an_ordinary_call() {
    use toolyard::proto::{RequestMeta, TaskSupport};

    let server = ServerBuilder::new("t", "0")
        .in_memory_tasks()
        .try_tool(
            tool_fn("job", "Runs only as a task", |_c, _a: NoArgs| async {
                Ok("done")
            })
            .map(|t| t.with_task_support(TaskSupport::Required)),
        )
        .start()
        .await
        .unwrap();
    let mut served = Stateless::new();
    let call = |id| Stateless::call(id, &json!({"name": "job", "arguments": {}}));
    let plain: RequestMeta = serde_json::from_value(meta(json!({}))).unwrap();
    server.serve_stateless(call(1), plain.clone(), served.delivery());
    let refused = served.answer().await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    server.serve_task_body(call(2), plain, served.delivery());
    let ran = served.answer().await;
    assert_eq!(ran["result"]["content"][0]["text"], "done", "{ran}");
    let extension: RequestMeta = serde_json::from_value(meta(
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    ))
    .unwrap();
    server.serve_task_body(call(3), extension, served.delivery());
    let ran = served.answer().await;
    assert_eq!(ran["result"]["content"][0]["text"], "done", "{ran}");
    assert_eq!(server.running_tasks(), 0);
}

/// A deferred tool's call served for a caller that makes the task itself (a NATS gateway)
/// runs as an ordinary request, its input rounds included, until the handler calls
/// `start_task`: there the handler stops (nothing after it runs) and the request answers
/// `task_handoff`. The same call served as the task's body with that round's answers runs
/// on from where it stopped, without asking again; a deferred tool that returns without
/// starting its task answers as usual.
#[tokio::test]
async fn a_handing_off_request_stops_at_start_task_and_the_task_body_goes_on_with_its_answers() {
    use toolyard::proto::{RequestMeta, TaskSupport};

    let after_start = Arc::new(AtomicUsize::new(0));
    let counted = after_start.clone();
    let schema: JsonObject = serde_json::from_value(
        json!({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}),
    )
    .unwrap();
    let server = ServerBuilder::new("t", "0")
        .try_tool(
            tool_fn(
                "greet",
                "Asks, then runs as a task",
                move |ctx: RequestContext, _a: NoArgs| {
                    let counted = counted.clone();
                    let schema = schema.clone();
                    async move {
                        let r = ctx
                            .elicit("name", ElicitRequestParams::form("name?", schema))
                            .await?;
                        let name = r
                            .content
                            .as_ref()
                            .and_then(|c| c.get("name"))
                            .and_then(|v| v.as_str())
                            .unwrap_or("?")
                            .to_owned();
                        ctx.start_task().await;
                        counted.fetch_add(1, Ordering::SeqCst);
                        Ok(format!("Hello, {name}!"))
                    }
                },
            )
            .map(|t| {
                t.with_task_support(TaskSupport::Required)
                    .with_deferred_task()
            }),
        )
        .try_tool(
            tool_fn("quick", "Never starts its task", |_c, _a: NoArgs| async {
                Ok("quick")
            })
            .map(|t| {
                t.with_task_support(TaskSupport::Optional)
                    .with_deferred_task()
            }),
        )
        .start()
        .await
        .unwrap();
    let mut served = Stateless::new();
    let call = |id, params: Value| Stateless::call(id, &params);
    let caps: RequestMeta = serde_json::from_value(meta(json!({
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    })))
    .unwrap();

    server.serve_handing_off_task(
        call(1, json!({"name": "greet", "arguments": {}})),
        caps.clone(),
        served.delivery(),
    );
    let asked = served.answer().await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert!(
        asked["result"]["inputRequests"]["name"].is_object(),
        "{asked}"
    );
    let state = asked["result"]["requestState"].clone();
    assert!(state.is_string(), "{asked}");

    let retry = json!({
        "name": "greet",
        "arguments": {},
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": state,
    });
    server.serve_handing_off_task(call(2, retry.clone()), caps.clone(), served.delivery());
    let handed = served.answer().await;
    assert_eq!(
        handed["result"],
        json!({"resultType": "task_handoff"}),
        "{handed}"
    );
    assert_eq!(toolyard::TASK_HANDOFF, "task_handoff");
    // The handler was stopped in `start_task`: nothing after it ran, and nothing will.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(after_start.load(Ordering::SeqCst), 0);
    assert_eq!(server.running_tasks(), 0);

    server.serve_task_body(call(3, retry), caps.clone(), served.delivery());
    let ran = served.answer().await;
    assert_eq!(ran["result"]["content"][0]["text"], "Hello, Ada!", "{ran}");
    assert_eq!(after_start.load(Ordering::SeqCst), 1);

    server.serve_handing_off_task(
        call(4, json!({"name": "quick", "arguments": {}})),
        caps.clone(),
        served.delivery(),
    );
    let quick = served.answer().await;
    assert_eq!(quick["result"]["content"][0]["text"], "quick", "{quick}");
    assert_eq!(quick["result"]["resultType"], "complete", "{quick}");
    // An ordinary request of the deferred tool (no task store here) runs it whole.
    server.serve_stateless(call(5, json!({"name": "greet", "arguments": {}, "inputResponses": {"name": {"action": "accept", "content": {"name": "Bo"}}}})), caps, served.delivery());
    let whole = served.answer().await;
    assert_eq!(
        whole["result"]["content"][0]["text"], "Hello, Bo!",
        "{whole}"
    );
}

/// The log lines a test's subscriber wrote.
#[derive(Clone, Default)]
struct LogBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_handlers_log_lines_carry_the_requests_trace_id() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    // The binary's default filter: only warnings and errors.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                #[derive(Deserialize, JsonSchema)]
                struct NoArgs {}
                let server = ServerBuilder::new("s", "1")
                    .tool(
                        tool_fn("chatty", "logs a line", |_ctx, _: NoArgs| async {
                            tokio::task::yield_now().await;
                            tracing::warn!("chatty ran");
                            Ok("done")
                        })
                        .unwrap(),
                    )
                    .start()
                    .await
                    .unwrap();
                let client = RawClient::connect(&server).await.unwrap();
                client.initialize(json!({})).await.unwrap();
                let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
                client
                    .request(
                        "tools/call",
                        json!({"name": "chatty", "arguments": {},
                            "_meta": {"traceparent": format!("00-{trace}-00f067aa0ba902b7-01")}}),
                    )
                    .await
                    .unwrap();
                client
                    .request("tools/call", json!({"name": "chatty", "arguments": {}}))
                    .await
                    .unwrap();
            });
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("chatty ran")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0]
            .contains("mcp{traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01}"),
        "{text}"
    );
    assert!(
        !lines[1].contains("traceparent"),
        "no context, no ids: {text}"
    );
}

#[tokio::test]
async fn with_the_log_span_off_a_handler_still_reads_its_requests_traceparent() {
    // Process-wide; nextest runs each test in a process of its own.
    toolyard::set_log_span(false);
    #[derive(Deserialize, JsonSchema)]
    struct NoArgs {}
    let server = ServerBuilder::new("s", "1")
        .tool(
            tool_fn(
                "whose",
                "names its trace context",
                |_ctx, _: NoArgs| async {
                    tokio::task::yield_now().await;
                    Ok(toolyard::request_traceparent().map_or("none".into(), |t| t.to_string()))
                },
            )
            .unwrap(),
        )
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = client
        .request(
            "tools/call",
            json!({"name": "whose", "arguments": {}, "_meta": {"traceparent": tp}}),
        )
        .await
        .unwrap();
    assert_eq!(traced["content"][0]["text"], tp);
    let plain = client
        .request("tools/call", json!({"name": "whose", "arguments": {}}))
        .await
        .unwrap();
    assert_eq!(plain["content"][0]["text"], "none");
}

/// A `gated://{name}` template whose provider checks subscriptions: names starting with
/// `no` are refused (after a wait, as a check that asks somewhere would), with the error
/// a failed read gets; the check sees the template's variables.
fn gated() -> toolyard::TemplateDef {
    let read: toolyard::ResourceFn = Arc::new(|_ctx, r| {
        Box::pin(async move {
            Ok(vec![toolyard::proto::ResourceContents::text(r.uri, None, "x")].into())
        })
    });
    let check: toolyard::SubscribeCheckFn = Arc::new(|_ctx, r| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            match r.vars.get("name") {
                Some(n) if n.starts_with("no") => Err(toolyard::HandlerError::failed(format!(
                    "Access denied: {}",
                    r.uri
                ))),
                _ => Ok(()),
            }
        })
    });
    toolyard::TemplateDef::new(
        toolyard::proto::ResourceTemplate {
            uri_template: "gated://{name}".into(),
            name: "gated".into(),
            title: None,
            description: None,
            mime_type: None,
            annotations: None,
            icons: None,
            meta: None,
        },
        read,
    )
    .unwrap()
    .check_subscriptions(check)
}

#[tokio::test]
async fn a_checked_subscription_counts_only_once_it_passes_and_keeps_the_connections_order() {
    let server = ServerBuilder::new("t", "0")
        .template(gated())
        .start()
        .await
        .unwrap();
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = heard.clone();
    server.watch_subscriptions(Arc::new(move |uri: &str, on: bool| {
        h.lock().unwrap().push((uri.to_owned(), on));
    }));
    let client = RawClient::connect(&server).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    match client
        .request("resources/subscribe", json!({"uri":"gated://nope"}))
        .await
    {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => {
            assert_eq!(e.code, -32603);
            assert_eq!(e.message, "Access denied: gated://nope");
        }
        other => panic!("a refused subscription must be an error, got {other:?}"),
    }
    // Pipelined: the checked subscribe, then an unsubscribe that needs no check. The
    // unsubscribe takes effect after it, so nothing stays subscribed.
    let (sub, unsub) = tokio::join!(
        client.request("resources/subscribe", json!({"uri":"gated://yes"})),
        client.request("resources/unsubscribe", json!({"uri":"gated://yes"})),
    );
    sub.unwrap();
    unsub.unwrap();
    client
        .request("resources/subscribe", json!({"uri":"gated://kept"}))
        .await
        .unwrap();
    server.notify_resource_updated("gated://nope");
    server.notify_resource_updated("gated://yes");
    server.notify_resource_updated("gated://kept");
    let n = client.next_notification().await.unwrap();
    assert_eq!(n["params"]["uri"], "gated://kept", "{n}");
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            ("gated://yes".to_owned(), true),
            ("gated://yes".to_owned(), false),
            ("gated://kept".to_owned(), true),
        ],
        "the refused URI never gained a listener"
    );
    // A modern listen naming a refused URI gets the error, not an acknowledgement.
    match client
        .request(
            "subscriptions/listen",
            json!({"_meta":meta(json!({})),"notifications":{"resourceSubscriptions":["gated://ok","gated://no"]}}),
        )
        .await
    {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => {
            assert_eq!(e.message, "Access denied: gated://no");
        }
        other => panic!("a refused listen must be an error, got {other:?}"),
    }
    let c = Arc::new(client);
    let listener = c.clone();
    let _listen = tokio::spawn(async move {
        listener
            .request_with_id(
                "listen-ok".into(),
                "subscriptions/listen",
                json!({"_meta":meta(json!({})),"notifications":{"resourceSubscriptions":["gated://ok"]}}),
            )
            .await
    });
    let ack = c.next_notification().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    server.notify_resource_updated("gated://ok");
    let n = c.next_notification().await.unwrap();
    assert_eq!(n["params"]["uri"], "gated://ok", "{n}");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-ok"
    );
}

/// With no tracing layer, a request without `_meta` context runs in its transport's: an
/// HTTP `traceparent` header reaches the handler (and so its outgoing calls) as it came.
#[tokio::test]
async fn without_a_tracing_layer_the_handler_runs_in_the_http_headers_trace_context_and_baggage() {
    let server = ServerBuilder::new("s", "1")
        .tool(
            tool_fn(
                "whoami",
                "the handler's trace context and baggage",
                |ctx, _: NoArgs| async move {
                    Ok(format!(
                        "{} {} {}",
                        ctx.traceparent().unwrap_or("none"),
                        ctx.tracestate().unwrap_or("none"),
                        ctx.baggage().unwrap_or("none")
                    ))
                },
            )
            .unwrap(),
        )
        .start()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = toolyard::http::router(server, toolyard::http::HttpConfig::default())
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let meta = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let client = reqwest::Client::new();
    for (id, in_meta, expected) in [
        // Nothing in `_meta`: the headers' context and baggage.
        (1, json!({}), format!("{header} h=1 from=header")),
        // `_meta`'s context wins whole (its state with it), and so does its baggage.
        (
            2,
            json!({"traceparent": meta, "baggage": "from=meta"}),
            format!("{meta} none from=meta"),
        ),
        // Baggage stands alone: `_meta`'s context, the header's baggage.
        (
            3,
            json!({"traceparent": meta, "tracestate": "m=1"}),
            format!("{meta} m=1 from=header"),
        ),
    ] {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        for (k, v) in in_meta.as_object().unwrap() {
            meta[k] = v.clone();
        }
        let text = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "whoami")
            .header("traceparent", header)
            .header("tracestate", "h=1")
            .header("baggage", "from=header")
            .body(
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": "whoami", "arguments": {}, "_meta": meta}})
                .to_string(),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            body["result"]["content"][0]["text"], expected,
            "`_meta` first, else the headers: {body}"
        );
    }
}

/// A reader's whole result reaches the caller: its `_meta`, and its caching hints for a
/// 2026-07-28 caller (a legacy caller gets no hints); a result without hints gets the
/// server's (`ListSettings::resource_ttl_ms`, private).
#[tokio::test]
async fn a_readers_meta_and_caching_hints_are_kept_and_missing_hints_take_the_servers() {
    use toolyard::client::{ClientBuilder, ProtocolChoice};
    use toolyard::proto::{
        CacheScope, Implementation, ProtocolVersion, ReadResourceResult, Resource, ResourceContents,
    };
    use toolyard::{MemoryTransport, ResourceDef};
    let hinted = ResourceDef::new(
        Resource::new("test://hinted", "hinted"),
        Arc::new(|_ctx, r| {
            Box::pin(async move {
                Ok(ReadResourceResult {
                    meta: json!({"etag": "v7"}).as_object().cloned(),
                    ttl_ms: Some(5_000),
                    cache_scope: Some(CacheScope::Public),
                    ..vec![ResourceContents::text(r.uri, None, "x")].into()
                })
            })
        }),
    );
    let plain = ResourceDef::new(
        Resource::new("test://plain", "plain"),
        Arc::new(|_ctx, r| {
            Box::pin(async move { Ok(vec![ResourceContents::text(r.uri, None, "y")].into()) })
        }),
    );
    let server = ServerBuilder::new("t", "0")
        .resource(hinted)
        .resource(plain)
        .start()
        .await
        .unwrap();
    for choice in [
        ProtocolChoice::Modern,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        let modern = matches!(choice, ProtocolChoice::Modern);
        let client = ClientBuilder::new(Implementation::new("reader-test", "1.0"))
            .protocol(choice)
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let hinted = client.read_resource("test://hinted").await.unwrap();
        assert_eq!(hinted.meta, json!({"etag": "v7"}).as_object().cloned());
        assert_eq!(hinted.ttl_ms, modern.then_some(5_000), "{choice:?}");
        assert_eq!(
            hinted.cache_scope,
            modern.then_some(CacheScope::Public),
            "{choice:?}"
        );
        let plain = client.read_resource("test://plain").await.unwrap();
        assert_eq!(plain.meta, None);
        assert_eq!(plain.ttl_ms, modern.then_some(0), "{choice:?}");
        assert_eq!(
            plain.cache_scope,
            modern.then_some(CacheScope::Private),
            "{choice:?}"
        );
    }
}
