//! Faults: a worker gone without a word, hostile messages on the bus, the broker killed and
//! restarted, a worker draining with calls in flight. Every call ends with an answer or a
//! JSON-RPC error naming the cause, within its deadline; nothing hangs.

use crate::*;
use async_nats::HeaderMap;
use futures_util::StreamExt;
use serde_json::{json, Value};
use toolyard_nats::wire;
use toolyard_testkit::NatsServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gone_without_a_word_is_no_responders_not_a_hang() {
    let nats = NatsServer::start();
    let client = connect(&nats.url()).await;
    let mut config = WorkerConfig::new("ghost");
    config.keepalive = Duration::from_millis(200);
    let _worker = Worker::start(worker_server(Arc::default()).await, client.clone(), config)
        .await
        .unwrap();
    let gw = gateway(&nats.url(), quick()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "ghost__echo")).await;
    // The worker's connection goes away; its catalog entry stays until it expires.
    client.drain().await.unwrap();
    // Let the server process the connection's end (its subscriptions go with it).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let e = gw
        .client
        .call_tool("ghost__echo", json!({"message": "anyone?"}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no worker serves `ghost`"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Publishes `body` with `headers` to `subject` with a fresh reply inbox and returns the
/// frames until the terminal one (bounded).
async fn raw_call(
    client: &async_nats::Client,
    subject: &str,
    headers: HeaderMap,
    body: &str,
) -> Vec<(String, Value)> {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await.unwrap();
    client
        .publish_with_reply_and_headers(subject.to_owned(), inbox, headers, body.to_owned().into())
        .await
        .unwrap();
    let mut frames = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(WAIT, sub.next()).await {
        let frame = m
            .headers
            .as_ref()
            .and_then(|h| h.get(wire::FRAME))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        let value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
        let terminal = frame == "end" || frame == "err";
        frames.push((frame, value));
        if terminal {
            break;
        }
    }
    frames
}

fn headers(method: &str, name: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(wire::WIRE, "1");
    h.insert(wire::METHOD, method);
    if let Some(n) = name {
        h.insert(wire::NAME, n);
    }
    h
}

fn call_body(name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": name, "arguments": {"message": "raw"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_messages_get_clear_errors_or_are_dropped_and_the_worker_stays_up() {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "calc", Arc::default()).await;
    let raw = connect(&nats.url()).await;
    let echo = wire::request_subject(wire::DEFAULT_PREFIX, "calc", "tools/call", Some("echo"));
    // A good raw call first: any NATS client can call a tool.
    let frames = raw_call(
        &raw,
        &echo,
        headers("tools/call", Some("echo")),
        &call_body("echo"),
    )
    .await;
    let (frame, answer) = frames.last().unwrap();
    assert_eq!(frame, "end");
    assert_eq!(answer["result"]["content"][0]["text"], "raw", "{answer}");
    // Not JSON: -32700.
    let frames = raw_call(
        &raw,
        &echo,
        headers("tools/call", Some("echo")),
        "{not json",
    )
    .await;
    assert_eq!(frames.last().unwrap().0, "err");
    assert_eq!(frames.last().unwrap().1["error"]["code"], -32700);
    // No Mcp-Wire: -32600.
    let mut no_wire = HeaderMap::new();
    no_wire.insert(wire::METHOD, "tools/call");
    let frames = raw_call(&raw, &echo, no_wire, &call_body("echo")).await;
    assert_eq!(frames.last().unwrap().1["error"]["code"], -32600);
    // The subject names `echo`, the body another tool: -32020.
    let frames = raw_call(
        &raw,
        &echo,
        headers("tools/call", Some("echo")),
        &call_body("sleep"),
    )
    .await;
    assert_eq!(
        frames.last().unwrap().1["error"]["code"],
        -32020,
        "{frames:?}"
    );
    // A forged cancellation for another id is ignored; positional params are -32602.
    let positional = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":["echo",{}]}"#;
    let frames = raw_call(&raw, &echo, headers("tools/call", Some("echo")), positional).await;
    assert_eq!(
        frames.last().unwrap().1["error"]["code"],
        -32602,
        "{frames:?}"
    );
    // A reply subject aimed at the system account: dropped, nothing published.
    raw.publish_with_reply_and_headers(
        echo.clone(),
        "$JS.API.STREAM.DELETE.x".to_owned(),
        headers("tools/call", Some("echo")),
        call_body("echo").into(),
    )
    .await
    .unwrap();
    // The worker is still up.
    let frames = raw_call(
        &raw,
        &echo,
        headers("tools/call", Some("echo")),
        &call_body("echo"),
    )
    .await;
    assert_eq!(frames.last().unwrap().0, "end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_killed_mid_call_ends_the_call_with_a_clear_error_and_a_restart_recovers() {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "slow", Arc::default()).await;
    let gw = gateway(&nats.url(), quick()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let client = gw.client.clone();
    let call =
        tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 60_000})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    nats.kill();
    let outcome = tokio::time::timeout(Duration::from_secs(15), call)
        .await
        .expect("the call ends within its inactivity deadline")
        .unwrap();
    let e = outcome.unwrap_err();
    assert!(e.to_string().contains("re-issue"), "{e}");
    nats.restart();
    // Both sides reconnect by themselves; calls work again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match gw
            .client
            .call_tool("slow__echo", json!({"message": "back"}))
            .await
        {
            Ok(r) if text(&r) == "back" => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no recovery after the restart: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_worker_cancels_what_outlives_the_drain_and_says_re_issue() {
    let nats = NatsServer::start();
    let seen = Arc::new(Seen::default());
    let worker = start_worker(&nats.url(), "slow", seen.clone()).await;
    let gw = gateway(&nats.url(), quick()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let client = gw.client.clone();
    let call =
        tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 60_000})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    worker.shutdown().await; // drain_timeout 500 ms
    let e = tokio::time::timeout(WAIT, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("re-issue"), "{e}");
    assert_eq!(seen.cancelled.load(std::sync::atomic::Ordering::SeqCst), 1);
}
