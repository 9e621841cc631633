//! The MCP client against our own server in this process (the in-memory transport), in both
//! generations: the handshake, every operation, input requests answered by handlers,
//! progress, timeouts and cancellation, the cache, subscriptions.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolyard::client::{
    elicit_handler, fixed_roots, sample_handler, Client, ClientBuilder, ClientError,
    ProtocolChoice, RequestOptions,
};
use toolyard::proto::{
    CompleteArgument, CompleteReference, CompleteRequestParams, ContentBlock, CreateMessageResult,
    ElicitAction, ElicitResult, LoggingLevel, PromptReference, ProtocolVersion, Role, Root,
    SamplingMessageContent, SamplingMessageContentBlock, SubscriptionFilter, TextContent,
};
use toolyard::MemoryTransport;
use toolyard::{tool_fn, ListSettings, RequestContext, Server, ServerBuilder};

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

async fn demo_server(page_size: usize) -> Server {
    toolyard_testkit::demo(ServerBuilder::new("demo", "1.0"))
        .list_settings(ListSettings {
            page_size,
            ..ListSettings::default()
        })
        .start()
        .await
        .unwrap()
}

fn builder(protocol: ProtocolChoice) -> ClientBuilder {
    ClientBuilder::new(toolyard::proto::Implementation::new("test-client", "1.0"))
        .protocol(protocol)
        .on_elicit(elicit_handler(|_p| async {
            let mut answer = ElicitResult::new(ElicitAction::Accept);
            answer.content = Some(json!({"name": "Ada"}).as_object().unwrap().clone());
            Ok(answer)
        }))
        .on_sample(sample_handler(|_p| async {
            Ok(CreateMessageResult {
                role: Role::Assistant,
                content: SamplingMessageContent::Single(SamplingMessageContentBlock::Text(
                    TextContent::new("short"),
                )),
                model: "test-model".into(),
                stop_reason: None,
                meta: None,
                result_type: None,
            })
        }))
        .on_roots(fixed_roots(vec![Root::new("file:///work", "work")]))
}

fn text(result: &toolyard::proto::CallToolResult) -> String {
    match &result.content[0] {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("expected text, got {other:?}"),
    }
}

const BOTH: [ProtocolChoice; 2] = [
    ProtocolChoice::Auto,
    ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
];

#[tokio::test]
async fn the_probe_picks_modern_and_a_pinned_legacy_version_initializes() {
    let server = demo_server(100).await;
    let modern = builder(ProtocolChoice::Auto)
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    assert!(modern.is_modern());
    let session = modern.session().unwrap();
    assert_eq!(session.server_info.unwrap().name, "demo");
    assert!(session.capabilities.tools.is_some());
    let legacy = builder(ProtocolChoice::Legacy(ProtocolVersion::V2025_06_18))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    assert_eq!(
        legacy.protocol_version(),
        Some(ProtocolVersion::V2025_06_18)
    );
    legacy.ping().await.unwrap();
    modern.ping().await.unwrap();
}

#[tokio::test]
async fn every_operation_works_in_both_generations() {
    let server = demo_server(2).await;
    for protocol in BOTH {
        let client = builder(protocol)
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let first = client.list_tools(None).await.unwrap();
        assert_eq!(first.tools.len(), 2, "{protocol:?}");
        assert!(first.next_cursor.is_some());
        let all = client.list_all_tools().await.unwrap();
        assert!(
            all.len() > 4 && all.iter().any(|t| t.name == "echo"),
            "{protocol:?}"
        );
        let echoed = client
            .call_tool("echo", json!({"message": "hi"}))
            .await
            .unwrap();
        assert_eq!(text(&echoed), "hi");
        let sum = client
            .call_tool("add", json!({"a": 2, "b": 3}))
            .await
            .unwrap();
        assert_eq!(sum.structured_content, Some(json!({"sum": 5.0})));
        let failed = client.call_tool_ok("fail", json!({})).await;
        assert!(
            matches!(failed, Err(ClientError::ToolCall { .. })),
            "{failed:?}"
        );
        let resources = client.list_all_resources().await.unwrap();
        assert!(resources.iter().any(|r| r.uri == "demo://readme"));
        let templates = client.list_all_resource_templates().await.unwrap();
        assert!(templates
            .iter()
            .any(|t| t.uri_template == "demo://users/{id}"));
        let read = client.read_resource("demo://users/42").await.unwrap();
        assert_eq!(read.contents.len(), 1);
        let prompts = client.list_all_prompts().await.unwrap();
        assert!(prompts.iter().any(|p| p.name == "greet"));
        let prompt = client
            .get_prompt("greet", json!({"name": "Ada"}))
            .await
            .unwrap();
        assert!(!prompt.messages.is_empty());
        let completion = client
            .complete(CompleteRequestParams {
                r#ref: CompleteReference::Prompt(PromptReference {
                    name: "code_review".into(),
                    title: None,
                }),
                argument: CompleteArgument {
                    name: "language".into(),
                    value: "ru".into(),
                },
                meta: None,
                context: None,
            })
            .await;
        assert_eq!(
            completion.unwrap().completion.values,
            vec!["rust"],
            "{protocol:?}"
        );
        let missing = client.request("no/such/method", json!({})).await;
        assert!(
            matches!(missing, Err(ClientError::MethodNotFound(_))),
            "{missing:?}"
        );
        client.close().await;
    }
}

#[tokio::test]
async fn elicitation_sampling_and_roots_are_answered_by_our_handlers_in_both_generations() {
    let server = demo_server(100).await;
    for protocol in BOTH {
        let client = builder(protocol)
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let hello = client.call_tool("ask_name", json!({})).await.unwrap();
        assert_eq!(text(&hello), "Hello, Ada!", "{protocol:?}");
        let summary = client
            .call_tool("summarize", json!({"text": "long"}))
            .await
            .unwrap();
        assert_eq!(text(&summary), "Summary: short", "{protocol:?}");
        let roots = client.call_tool("list_roots", json!({})).await.unwrap();
        assert_eq!(text(&roots), "file:///work", "{protocol:?}");
    }
}

#[tokio::test]
async fn a_client_without_a_handler_gets_a_clear_error_not_a_hang() {
    let server = demo_server(100).await;
    let client = ClientBuilder::new(toolyard::proto::Implementation::new("bare", "1"))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    // Modern: the server sees no elicitation capability and refuses (-32021).
    let r = client.call_tool("ask_name", json!({})).await;
    assert!(r.is_err() || r.as_ref().unwrap().failed(), "{r:?}");
}

#[tokio::test]
async fn progress_reaches_the_callback_and_extends_the_timeout() {
    let server = demo_server(100).await;
    for protocol in BOTH {
        let client = builder(protocol)
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        // 6 steps of 150 ms: 900 ms in all, with a 400 ms timeout that each progress
        // notification restarts.
        let opts = RequestOptions::default()
            .timeout(Duration::from_millis(400))
            .on_progress(move |_p| {
                s.fetch_add(1, Ordering::SeqCst);
            });
        let done = client
            .call_tool_with("slow", json!({"steps": 6, "delay_ms": 150}), &opts)
            .await
            .unwrap();
        assert_eq!(text(&done), "done after 6 steps");
        assert!(seen.load(Ordering::SeqCst) >= 5, "{protocol:?}");
    }
}

/// A caller with no progress callback gets no progress channel; its timeout is still moved
/// by each progress notification (read from the pending table when the timer fires).
#[tokio::test]
async fn progress_extends_the_timeout_of_a_request_without_a_progress_callback() {
    let server = demo_server(100).await;
    for protocol in BOTH {
        let client = builder(protocol)
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let opts = RequestOptions::default().timeout(Duration::from_millis(400));
        let done = client
            .call_tool_with("slow", json!({"steps": 6, "delay_ms": 150}), &opts)
            .await
            .unwrap();
        assert_eq!(text(&done), "done after 6 steps", "{protocol:?}");
        // And without progress the same timeout still fires.
        let late = client
            .call_tool_with("slow", json!({"steps": 1, "delay_ms": 900}), &opts)
            .await;
        assert!(
            matches!(late, Err(ClientError::Timeout { .. })),
            "{protocol:?}: {late:?}"
        );
    }
}

fn cancellable_server_tool(cancelled: Arc<AtomicBool>) -> toolyard::ToolDef {
    /// Set when the call ends without finishing: the server either signals the token or
    /// drops the task, and both count as the server seeing the cancellation.
    struct Watch(Arc<AtomicBool>, bool);
    impl Watch {
        fn finished(&mut self) {
            self.1 = true;
        }
    }
    impl Drop for Watch {
        fn drop(&mut self) {
            if !self.1 {
                self.0.store(true, Ordering::SeqCst);
            }
        }
    }
    tool_fn(
        "hang",
        "Waits until cancelled",
        move |ctx: RequestContext, _a: NoArgs| {
            let mut watch = Watch(cancelled.clone(), false);
            async move {
                tokio::select! {
                    () = ctx.cancelled() => Ok("cancelled"),
                    () = tokio::time::sleep(Duration::from_secs(60)) => {
                        watch.finished();
                        Ok("finished")
                    }
                }
            }
        },
    )
    .unwrap()
}

/// A server whose `hang` tool waits until cancelled, and the flag its cancellation sets.
async fn hang_server() -> (Server, Arc<AtomicBool>) {
    let cancelled = Arc::new(AtomicBool::new(false));
    let server = ServerBuilder::new("t", "0")
        .tool(cancellable_server_tool(cancelled.clone()))
        .start()
        .await
        .unwrap();
    (server, cancelled)
}

#[tokio::test]
async fn a_call_that_times_out_is_cancelled_on_the_server() {
    for protocol in BOTH {
        let (server, cancelled) = hang_server().await;
        let client = builder(protocol)
            .request_timeout(Duration::from_millis(200))
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let r = client.call_tool("hang", json!({})).await;
        assert!(matches!(r, Err(ClientError::Timeout { .. })), "{r:?}");
        wait_for(|| cancelled.load(Ordering::SeqCst)).await;
    }
}

/// One sweeper keeps every request's deadline: a request with a short timeout sent while
/// one with a long timeout waits still times out on its own deadline, and the connection
/// serves the next call (the late answer finds no caller).
#[tokio::test]
async fn a_short_timeout_sent_after_a_long_one_fires_on_its_own_deadline() {
    let (server, cancelled) = hang_server().await;
    let client = builder(BOTH[1])
        .request_timeout(Duration::from_secs(120))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let c = client.clone();
    let long = tokio::spawn(async move { c.call_tool("hang", json!({})).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let opts = RequestOptions::default().timeout(Duration::from_millis(200));
    let short = tokio::time::timeout(
        Duration::from_secs(20),
        client.call_tool_with("hang", json!({}), &opts),
    )
    .await
    .expect("the short timeout fired, not the long one");
    assert!(
        matches!(short, Err(ClientError::Timeout { .. })),
        "{short:?}"
    );
    wait_for(|| cancelled.load(Ordering::SeqCst)).await;
    assert!(!long.is_finished(), "the long call still waits");
    client.ping().await.unwrap();
    long.abort();
}

/// Progress moves a request's deadline, but never past the client's hard maximum.
#[tokio::test]
async fn progress_cannot_extend_a_request_past_the_hard_maximum() {
    let server = demo_server(100).await;
    let client = builder(BOTH[1])
        .max_request_timeout(Duration::from_millis(600))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    // 20 steps of 150 ms (3 s) with a 400 ms timeout each step restarts: only the 600 ms
    // maximum stops it.
    let opts = RequestOptions::default().timeout(Duration::from_millis(400));
    let r = client
        .call_tool_with("slow", json!({"steps": 20, "delay_ms": 150}), &opts)
        .await;
    match r {
        Err(ClientError::Timeout { after, .. }) => {
            assert!(after >= Duration::from_millis(600), "{after:?}");
            assert!(after < Duration::from_secs(3), "{after:?}");
        }
        other => panic!("expected a timeout: {other:?}"),
    }
    client.ping().await.unwrap();
}

/// A client whose runtime has gone (made in a `block_on` that has ended) still answers a
/// request within its timeout, rather than leaving it waiting for a sweeper that went with
/// that runtime.
#[tokio::test]
async fn a_client_outliving_the_runtime_it_was_made_on_still_times_out() {
    let (server, _cancelled) = hang_server().await;
    let s = server.clone();
    let client = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(builder(BOTH[1]).connect(MemoryTransport::new(&s)))
            .unwrap()
    })
    .join()
    .unwrap();
    let opts = RequestOptions::default().timeout(Duration::from_millis(200));
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        client.call_tool_with("hang", json!({}), &opts),
    )
    .await
    .expect("an answer, not a wait for ever");
    assert!(answer.is_err(), "{answer:?}");
}

#[tokio::test]
async fn dropping_a_call_cancels_it_on_the_server() {
    let (server, cancelled) = hang_server().await;
    let client = builder(BOTH[1])
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let c = client.clone();
    let call = tokio::spawn(async move { c.call_tool("hang", json!({})).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    call.abort();
    wait_for(|| cancelled.load(Ordering::SeqCst)).await;
    // The connection is still good.
    client.ping().await.unwrap();
}

#[tokio::test]
async fn closing_fails_pending_calls_at_once() {
    let server = demo_server(100).await;
    let client = builder(BOTH[1])
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let c = client.clone();
    let call = tokio::spawn(async move {
        c.call_tool("slow", json!({"steps": 1, "delay_ms": 60_000}))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.close().await;
    let r = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(ClientError::Closed)), "{r:?}");
    let after = client.call_tool("echo", json!({"message": "x"})).await;
    assert!(after.is_err());
}

#[tokio::test]
async fn modern_listings_are_cached_for_their_ttl_until_a_list_changed_notification() {
    let server = demo_server(100).await;
    let client = builder(ProtocolChoice::Auto)
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let before = client.list_all_tools().await.unwrap().len();
    let mut sub = client
        .subscribe(SubscriptionFilter {
            tools_list_changed: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    server.add_tools(vec![tool_fn("extra", "x", |_c, _a: NoArgs| async {
        Ok("x")
    })
    .unwrap()]);
    // The listing was cached (ttlMs 60 s) ...
    let notice = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let n = sub.next().await.unwrap();
            if n.method == "notifications/tools/list_changed" {
                return n;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(notice.method, "notifications/tools/list_changed");
    // ... and the notification dropped it.
    let after = client.list_all_tools().await.unwrap();
    assert_eq!(after.len(), before + 1);
    server.remove_tools(vec!["echo".into()]);
    // Without a notification read yet, a listing inside the ttl may still come from cache;
    // wait for the notification, then it must be fresh.
    tokio::time::timeout(Duration::from_secs(5), async {
        while sub.next().await.unwrap().method != "notifications/tools/list_changed" {}
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fresh = client.list_all_tools().await.unwrap();
    assert!(!fresh.iter().any(|t| t.name == "echo"));
}

#[tokio::test]
async fn a_cached_listing_is_served_without_asking_the_server() {
    let server = demo_server(100).await;
    let client = builder(ProtocolChoice::Auto)
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let before = client.list_all_tools().await.unwrap().len();
    server.add_tools(vec![tool_fn("extra", "x", |_c, _a: NoArgs| async {
        Ok("x")
    })
    .unwrap()]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        client.list_all_tools().await.unwrap().len(),
        before,
        "served from the cache"
    );
    let uncached = builder(ProtocolChoice::Auto)
        .cache(false)
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    assert_eq!(uncached.list_all_tools().await.unwrap().len(), before + 1);
}

#[tokio::test]
async fn log_messages_reach_the_callback_at_the_level_asked_for() {
    let server = demo_server(100).await;
    for protocol in BOTH {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let l = logs.clone();
        let client = builder(protocol)
            .on_log(move |m| l.lock().unwrap().push(m.data.clone()))
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        client.set_log_level(LoggingLevel::Info).await.unwrap();
        client
            .call_tool("slow", json!({"steps": 2, "delay_ms": 10}))
            .await
            .unwrap();
        wait_for(|| logs.lock().unwrap().len() >= 2).await;
        assert_eq!(
            logs.lock().unwrap()[0],
            json!("step 1 of 2"),
            "{protocol:?}"
        );
    }
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not met within 5 s");
}

#[tokio::test]
async fn clones_share_one_connection_and_the_last_drop_closes_it() {
    let server = demo_server(100).await;
    let client: Client = builder(BOTH[1])
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let clones: Vec<Client> = (0..8).map(|_| client.clone()).collect();
    let calls = clones.into_iter().enumerate().map(|(i, c)| {
        tokio::spawn(async move { c.call_tool("echo", json!({"message": i.to_string()})).await })
    });
    for (i, call) in calls.enumerate() {
        assert_eq!(text(&call.await.unwrap().unwrap()), i.to_string());
    }
}
