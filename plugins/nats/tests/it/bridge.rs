//! The bridge working: discovery, calls, progress, load sharing, cancellation, deadlines.

use crate::*;
use serde_json::json;
use std::sync::atomic::Ordering;
use toolyard_testkit::{NatsServer, RawClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_tools_are_listed_and_called_through_the_gateway_with_progress() {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "calc", Arc::default()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let names = listed(&gw.client, |n| n.iter().any(|t| t == "calc__echo")).await;
    assert!(names.contains(&"calc__progress".to_owned()), "{names:?}");
    let r = gw
        .client
        .call_tool("calc__echo", json!({"message": "over the bus"}))
        .await
        .unwrap();
    assert_eq!(text(&r), "over the bus");
    // Progress from the worker reaches the caller as it comes.
    let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = steps.clone();
    let opts = toolyard::client::RequestOptions::default()
        .on_progress(move |p| seen.lock().unwrap().push(p.progress));
    let r = gw
        .client
        .call_tool_with("calc__progress", json!({}), &opts)
        .await
        .unwrap();
    assert_eq!(text(&r), "done");
    assert_eq!(*steps.lock().unwrap(), vec![1.0, 2.0, 3.0]);
    // The worker validates arguments against its own schema.
    let bad = gw
        .client
        .call_tool("calc__echo", json!({"message": 7}))
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_appearing_and_draining_change_the_listing() {
    let nats = NatsServer::start();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let a = start_worker(&nats.url(), "alpha", Arc::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "alpha__echo")).await;
    let b = start_worker(&nats.url(), "beta", Arc::default()).await;
    listed(&gw.client, |n| {
        n.iter().any(|t| t == "alpha__echo") && n.iter().any(|t| t == "beta__echo")
    })
    .await;
    a.shutdown().await;
    listed(&gw.client, |n| {
        !n.iter().any(|t| t.starts_with("alpha__")) && n.iter().any(|t| t == "beta__echo")
    })
    .await;
    b.shutdown().await;
    listed(&gw.client, |n| !n.iter().any(|t| t.starts_with("beta__"))).await;
    assert!(gw.remote.tools().is_empty());
}

/// An embedder subscribed to the gateway's lifecycle hears a worker come up when its tools
/// are installed and go down when it leaves, and `/readyz`'s table lists it down, optional.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_coming_and_going_are_lifecycle_events_and_readiness_lists_them() {
    use toolyard::LifecycleEvent;
    let nats = NatsServer::start();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let mut events = gw.server.lifecycle().subscribe();
    let worker = start_worker(&nats.url(), "alpha", Arc::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "alpha__echo")).await;
    worker.shutdown().await;
    listed(&gw.client, |n| !n.iter().any(|t| t.starts_with("alpha__"))).await;
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            LifecycleEvent::ComponentUp {
                kind: "worker",
                name,
            } => seen.push(format!("up {name}")),
            LifecycleEvent::ComponentDown {
                kind: "worker",
                name,
                required,
                ..
            } => seen.push(format!("down {name} required={required}")),
            _ => {}
        }
    }
    assert_eq!(seen, ["up alpha", "down alpha required=false"], "{seen:?}");
    let readiness = gw.server.lifecycle().readiness();
    assert!(
        readiness.ready,
        "an optional worker down keeps the gateway ready"
    );
    assert!(
        readiness
            .down
            .iter()
            .any(|(kind, name, _, required)| kind == "worker" && name == "alpha" && !required),
        "{:?}",
        readiness.down
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_of_one_name_share_the_calls_and_one_drained_loses_none() {
    let nats = NatsServer::start();
    let (seen_a, seen_b) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let a = start_worker(&nats.url(), "pool", seen_a.clone()).await;
    let _b = start_worker(&nats.url(), "pool", seen_b.clone()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "pool__sleep")).await;
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let c = gw.client.clone();
            tokio::spawn(async move { c.call_tool("pool__sleep", json!({"ms": 20})).await })
        })
        .collect();
    for c in calls {
        assert_eq!(text(&c.await.unwrap().unwrap()), "slept");
    }
    let (na, nb) = (
        seen_a.finished.load(Ordering::SeqCst),
        seen_b.finished.load(Ordering::SeqCst),
    );
    assert_eq!(na + nb, 20);
    assert!(
        na > 0 && nb > 0,
        "the queue group spread nothing: {na} / {nb}"
    );
    // Draining one worker: the other takes every later call.
    a.shutdown().await;
    for _ in 0..5 {
        let r = gw
            .client
            .call_tool("pool__echo", json!({"message": "still here"}))
            .await
            .unwrap();
        assert_eq!(text(&r), "still here");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_cancels_it_on_the_worker() {
    let nats = NatsServer::start();
    let seen = Arc::new(Seen::default());
    let _worker = start_worker(&nats.url(), "slow", seen.clone()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let client = gw.client.clone();
    let call =
        tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 30_000})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    call.abort(); // dropping the call cancels it (the client sends notifications/cancelled)
    counted(&seen.cancelled, "the worker's tool was never cancelled").await;
    assert_eq!(seen.finished.load(Ordering::SeqCst), 0);
}

/// A call its tool answers without awaiting anything (the echo) costs the bus no
/// subscription: the worker answers it before it would listen on `{reply}.ctl`, and the
/// gateway's replies share one subscription. (Each such call used to subscribe to its
/// `{reply}.ctl` and unsubscribe again.) The broker's own count of subscriptions made
/// (`/subsz` `num_inserts`) shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answered_at_once_costs_the_bus_no_subscription() {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "calc", Arc::new(Seen::default())).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "calc__echo")).await;
    let call = |message: String| {
        let client = gw.client.clone();
        async move {
            let result = client
                .call_tool("calc__echo", json!({ "message": message }))
                .await
                .unwrap();
            assert_eq!(text(&result), message);
        }
    };
    // What the first call sets up (and the catalog's watchers) is not counted.
    call("first".into()).await;
    let inserts = || async {
        monitor(&nats, "/subsz").await["num_inserts"]
            .as_u64()
            .unwrap()
    };
    let before = inserts().await;
    for i in 0..200 {
        call(format!("hello {i}")).await;
    }
    let made = inserts().await - before;
    // The bus's own background (a consumer of the catalog watch re-created on a loaded
    // machine) subscribes a few times at most; a subscription per call would be 200.
    assert!(
        made < 50,
        "200 calls answered at once made {made} subscriptions"
    );
}

/// N13 through the gateway: a call cancelled at once, its cancel reaching the bus before
/// the worker listens on `{reply}.ctl`, still stops on the worker (the gateway repeats the
/// cancel until the worker's terminal frame comes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_at_once_still_stops_on_the_worker() {
    let nats = NatsServer::start();
    let seen = Arc::new(Seen::default());
    let _worker = start_worker(&nats.url(), "slow", seen.clone()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    for i in 0..12u64 {
        let client = gw.client.clone();
        let call =
            tokio::spawn(
                async move { client.call_tool("slow__sleep", json!({"ms": 30_000})).await },
            );
        tokio::time::sleep(Duration::from_micros(1_000 + (i % 4) * 500)).await;
        call.abort();
    }
    // Every call that reached the tool is cancelled there, and stays so for a while (a
    // request still on its way could start a sleep nobody stops).
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut settled_since = None;
    loop {
        let started = seen.started.load(Ordering::SeqCst);
        let cancelled = seen.cancelled.load(Ordering::SeqCst);
        if started > 0 && started == cancelled {
            let since = *settled_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() > Duration::from_millis(500) {
                break;
            }
        } else {
            settled_since = None;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{started} calls reached the tool, {cancelled} were cancelled there: a cancel was lost"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.finished.load(Ordering::SeqCst), 0);
}

/// A request that waits in the worker for a slot listens for its cancellation meanwhile: a
/// call cancelled while it waits ends there and never runs. (Before, it waited unseen in
/// the worker's subscription, the gateway's repeated cancel went unheard, and it ran once a
/// slot was free.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_it_waits_for_a_slot_never_runs() {
    let nats = NatsServer::start();
    let seen = Arc::new(Seen::default());
    let _worker = start_worker_with_slots(&nats.url(), "slow", seen.clone(), 1, None).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let client = gw.client.clone();
    let running =
        tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 3_000})).await });
    counted(&seen.started, "the first call never ran").await;
    let client = gw.client.clone();
    let waiting =
        tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 30_000})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiting.abort();
    let first = tokio::time::timeout(WAIT, running)
        .await
        .expect("the first call ends")
        .unwrap()
        .unwrap();
    assert!(format!("{first:?}").contains("slept"), "{first:?}");
    // The slot is free: a cancel that had been lost would let the second call start now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        seen.started.load(Ordering::SeqCst),
        1,
        "the call cancelled while it waited for a slot ran anyway"
    );
}

/// A worker on one runtime thread runs a request's first step in its subscription loop (a
/// task only for what awaits), on several it gives each request a task at once: either way
/// a tool that panics fails its own call with an error, and neither a call running beside
/// it nor the ones after it notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_panics_on_a_worker_fails_only_its_own_call() {
    for threads in [1, 2] {
        let nats = NatsServer::start();
        let seen = Arc::new(Seen::default());
        let _worker = WorkerElsewhere::start(&nats.url(), "calc", seen.clone(), threads);
        let gw = gateway(&nats.url(), RemoteConfig::default()).await;
        listed(&gw.client, |n| n.iter().any(|t| t == "calc__boom")).await;
        let client = gw.client.clone();
        let running =
            tokio::spawn(
                async move { client.call_tool("calc__sleep", json!({"ms": 1_000})).await },
            );
        counted(&seen.started, "the sleeping call never started").await;
        for _ in 0..3 {
            let boom = gw.client.call_tool("calc__boom", json!({})).await;
            let failed = match &boom {
                Ok(r) => r.is_error == Some(true) && text(r).contains("boom"),
                Err(e) => e.to_string().contains("boom"),
            };
            assert!(
                failed,
                "{threads} thread(s): a panicking tool must fail its call naming the panic: {boom:?}"
            );
            still_serves(&gw.client).await;
        }
        let slept = tokio::time::timeout(WAIT, running)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(text(&slept), "slept");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_deadline_stops_the_work_on_the_worker() {
    let nats = NatsServer::start();
    let seen = Arc::new(Seen::default());
    let _worker = start_worker(&nats.url(), "slow", seen.clone()).await;
    let gw = gateway(
        &nats.url(),
        RemoteConfig {
            call_timeout: Duration::from_millis(300),
            ..RemoteConfig::default()
        },
    )
    .await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let e = gw
        .client
        .call_tool("slow__sleep", json!({"ms": 30_000}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("deadline"), "{e}");
    counted(&seen.cancelled, "the worker kept working").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_and_baggage_cross_the_bus_from_meta_or_from_the_headers() {
    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "calc", Arc::default()).await;
    // Through a gateway: the caller's `_meta.traceparent` reaches the worker's tool.
    let server = ServerBuilder::new("gateway", "1.0").start().await.unwrap();
    let remote = RemoteTools::start(
        server.clone(),
        connect(&nats.url()).await,
        RemoteConfig::default(),
    )
    .await
    .unwrap();
    assert!(
        remote.tools().contains(&"calc__trace".to_owned()),
        "{:?}",
        remote.tools()
    );
    let raw = toolyard_testkit::RawClient::connect(&server).await.unwrap();
    // The registry takes the tools a moment after `tools()` lists them (an actor message).
    let deadline = tokio::time::Instant::now() + WAIT;
    let answer = loop {
        let r = raw
            .request(
                "tools/call",
                json!({"name": "calc__trace", "arguments": {}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "traceparent": PARENT, "baggage": "tenant=acme"}}),
            )
            .await;
        match r {
            Ok(v) => break v,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(
        answer["content"][0]["text"],
        format!("{PARENT} tenant=acme"),
        "{answer}"
    );
    // A plain NATS caller that sends the trace context and baggage in headers only.
    let client = connect(&nats.url()).await;
    let inbox = client.new_inbox();
    let mut frames = client.subscribe(inbox.clone()).await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Mcp-Wire", "1");
    headers.insert("Mcp-Method", "tools/call");
    headers.insert("Mcp-Name", "trace");
    headers.insert("traceparent", PARENT);
    headers.insert("baggage", "k=v");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "trace", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    client
        .publish_with_reply_and_headers(
            "mcp.v1.req._._.calc.tools.call.trace".to_owned(),
            inbox,
            headers,
            body.to_string().into(),
        )
        .await
        .unwrap();
    use futures_util::StreamExt;
    let end = tokio::time::timeout(WAIT, frames.next())
        .await
        .unwrap()
        .unwrap();
    let end: serde_json::Value = serde_json::from_slice(&end.payload).unwrap();
    assert_eq!(
        end["result"]["content"][0]["text"],
        format!("{PARENT} k=v"),
        "{end}"
    );
}

/// The notifications a raw client gets within `ms`.
async fn notifications_within(client: &toolyard_testkit::RawClient, ms: u64) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(Some(n)) =
        tokio::time::timeout(Duration::from_millis(ms), client.next_notification()).await
    {
        seen.push(format!(
            "{} {}",
            n["method"].as_str().unwrap_or_default(),
            n["params"]["uri"].as_str().unwrap_or_default()
        ));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_events_raised_anywhere_reach_the_subscribers_of_every_gateway_once() {
    let nats = NatsServer::start();
    let mut servers = Vec::new();
    let mut relays = Vec::new();
    for name in ["gw-a", "gw-b", "worker"] {
        let server = toolyard_testkit::demo(ServerBuilder::new(name, "1"))
            .start()
            .await
            .unwrap();
        let client = toolyard_nats::connect(&nats.url(), name).await.unwrap();
        relays.push(
            toolyard_nats::EventRelay::start(server.clone(), client, "mcp.v1")
                .await
                .unwrap(),
        );
        servers.push(server);
    }
    let (a, b, worker) = (&servers[0], &servers[1], &servers[2]);
    let on_a = toolyard_testkit::RawClient::connect(a).await.unwrap();
    on_a.initialize(json!({})).await.unwrap();
    let on_b = toolyard_testkit::RawClient::connect(b).await.unwrap();
    on_b.initialize(json!({})).await.unwrap();
    on_b.request("resources/subscribe", json!({"uri": "demo://readme"}))
        .await
        .unwrap();
    // The subscriptions reach the broker before anything is published.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Raised on a worker: a subscriber on a gateway hears of it.
    worker.notify_resource_updated("demo://readme");
    worker.notify_resource_updated("demo://not-subscribed");
    let seen = notifications_within(&on_b, 500).await;
    assert_eq!(seen, vec!["notifications/resources/updated demo://readme"]);

    // Raised on gateway A: its own client hears it once (no echo back over the bus), and
    // B's client hears it too.
    a.publish(toolyard::Event::ToolsChanged);
    let seen_a = notifications_within(&on_a, 500).await;
    assert_eq!(seen_a, vec!["notifications/tools/list_changed "]);
    let seen_b = notifications_within(&on_b, 500).await;
    assert_eq!(seen_b, vec!["notifications/tools/list_changed "]);

    // A malformed event on the subject is dropped; the relay keeps working.
    let raw = toolyard_nats::connect(&nats.url(), "raw").await.unwrap();
    raw.publish("mcp.v1.events", "not json".into())
        .await
        .unwrap();
    raw.flush().await.unwrap();
    worker.publish(toolyard::Event::ToolsChanged);
    let seen_b = notifications_within(&on_b, 500).await;
    assert_eq!(seen_b, vec!["notifications/tools/list_changed "]);
    assert!(relays.iter().all(|r| r.dropped() == 0));
}

/// A flood of change events, from a plain NATS client on the subject or raised by another
/// process, reaches a gateway's subscriber as a few notifications (each kind and resource
/// once a pace), the last word among them, and the gateway serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_change_events_reaches_subscribers_paced_with_its_last_word() {
    use futures_util::StreamExt;
    const FLOOD: usize = 20_000;
    let nats = NatsServer::start();
    let gw_server = toolyard_testkit::demo(ServerBuilder::new("gw", "1"))
        .start()
        .await
        .unwrap();
    let gw_relay =
        toolyard_nats::EventRelay::start(gw_server.clone(), connect(&nats.url()).await, "mcp.v1")
            .await
            .unwrap();
    let flooder = toolyard_testkit::demo(ServerBuilder::new("flooder", "1"))
        .start()
        .await
        .unwrap();
    let flooder_relay =
        toolyard_nats::EventRelay::start(flooder.clone(), connect(&nats.url()).await, "mcp.v1")
            .await
            .unwrap();
    let on_gw = toolyard_testkit::RawClient::connect(&gw_server)
        .await
        .unwrap();
    on_gw.initialize(json!({})).await.unwrap();
    for uri in ["demo://readme", "demo://logo"] {
        on_gw
            .request("resources/subscribe", json!({"uri": uri}))
            .await
            .unwrap();
    }
    let raw = connect(&nats.url()).await;
    // Everything on the subject, to count what the flooding process publishes.
    let mut on_bus = raw.subscribe("mcp.v1.events").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // From a plain client: a backend gone wild.
    let list_changed = br#"{"event":"tools/list_changed"}"#;
    let updated = br#"{"event":"resources/updated","uri":"demo://readme"}"#;
    for i in 0..FLOOD {
        let body: &[u8] = if i % 2 == 0 { list_changed } else { updated };
        raw.publish("mcp.v1.events", bytes::Bytes::from_static(body))
            .await
            .unwrap();
    }
    raw.publish(
        "mcp.v1.events",
        r#"{"event":"resources/updated","uri":"demo://logo"}"#.into(),
    )
    .await
    .unwrap();
    raw.flush().await.unwrap();
    let seen = notifications_within(&on_gw, 1_000).await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("notifications/resources/updated demo://logo"),
        "the last word gets through: {seen:?}"
    );
    assert!(
        seen.len() < FLOOD / 20,
        "{} notifications for {FLOOD} events",
        seen.len()
    );
    assert!(seen.contains(&"notifications/tools/list_changed ".to_owned()));
    assert!(seen.contains(&"notifications/resources/updated demo://readme".to_owned()));

    // Raised in another process: it publishes few events on the bus, the last among them.
    while tokio::time::timeout(Duration::from_millis(300), on_bus.next())
        .await
        .is_ok_and(|m| m.is_some())
    {}
    for _ in 0..FLOOD {
        flooder.publish(toolyard::Event::ToolsChanged);
        flooder.notify_resource_updated("demo://readme");
    }
    flooder.notify_resource_updated("demo://logo");
    let mut published = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(1_000), on_bus.next()).await
    {
        published.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    assert!(
        published.len() < FLOOD / 20,
        "{} published for {} raised",
        published.len(),
        2 * FLOOD
    );
    assert_eq!(
        published.last().map(String::as_str),
        Some(r#"{"event":"resources/updated","uri":"demo://logo"}"#)
    );
    let seen = notifications_within(&on_gw, 500).await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("notifications/resources/updated demo://logo"),
        "{seen:?}"
    );
    assert!(seen.len() < FLOOD / 20, "{}", seen.len());
    assert_eq!(gw_relay.dropped() + flooder_relay.dropped(), 0);

    // The gateway's server serves on.
    let listed = on_gw.request("tools/list", json!({})).await.unwrap();
    assert!(
        listed["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_elicitation_reaches_the_gateways_caller_in_both_generations() {
    use toolyard::proto::{ElicitAction, ElicitRequestParams, ElicitResult, ProtocolVersion};
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "asker", Arc::default()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "asker__ask")).await;
    let server = gw.server.clone();
    for choice in [
        ProtocolChoice::Modern,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let client = ClientBuilder::new(Implementation::new("asker-test", "1.0"))
            .protocol(choice)
            .request_timeout(WAIT)
            .on_elicit(Arc::new(move |params: ElicitRequestParams| {
                let log = log.clone();
                Box::pin(async move {
                    let question = serde_json::to_value(&params).unwrap()["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let name = if question.starts_with("First") {
                        "Ada"
                    } else {
                        "Lovelace"
                    };
                    log.lock().unwrap().push(question);
                    let mut content = toolyard::proto::JsonObject::new();
                    content.insert("name".into(), json!(name));
                    Ok(ElicitResult {
                        action: ElicitAction::Accept,
                        content: Some(content),
                        meta: None,
                        result_type: None,
                    })
                })
            }))
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let r = client.call_tool("asker__ask", json!({})).await.unwrap();
        assert_eq!(text(&r), "Ada Lovelace", "{choice:?}: {r:?}");
        let asked = asked.lock().unwrap().clone();
        assert!(
            asked.contains(&"First name?".to_owned()) && asked.contains(&"Last name?".to_owned()),
            "{choice:?}: {asked:?}"
        );
    }
}

/// A worker of `calc` ([`worker_server`]) whose heartbeat is an hour, so that whatever reaches
/// a gateway within a test came from a change; its server, and a gateway that lists it.
async fn calc_on_an_hourly_heartbeat(url: &str) -> (Server, Worker, Gateway) {
    let server = worker_server(Arc::default()).await;
    let mut config = WorkerConfig::new("calc");
    config.heartbeat = Duration::from_secs(3600);
    let worker = Worker::start(server.clone(), connect(url).await, config)
        .await
        .unwrap();
    let gw = gateway(url, RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "calc__echo")).await;
    (server, worker, gw)
}

/// A worker's tools changing (here added and removed in process; under `toolyard worker`,
/// a gateway source's tools changing upstream) re-put its catalog entry at once, not on the
/// next heartbeat: the heartbeat here is an hour, far beyond the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_tools_changing_reach_the_gateway_before_the_next_heartbeat() {
    let nats = NatsServer::start();
    let (server, worker, gw) = calc_on_an_hourly_heartbeat(&nats.url()).await;
    server.add_tools(vec![tool_fn(
        "late",
        "Added later",
        |_ctx, a: Echo| async move { Ok(a.message) },
    )
    .unwrap()]);
    listed(&gw.client, |n| n.iter().any(|t| t == "calc__late")).await;
    let r = gw
        .client
        .call_tool("calc__late", json!({"message": "new tool"}))
        .await
        .unwrap();
    assert_eq!(text(&r), "new tool");
    server.remove_tools(vec!["echo".into()]);
    let names = listed(&gw.client, |n| !n.iter().any(|t| t == "calc__echo")).await;
    assert!(names.contains(&"calc__late".to_owned()), "{names:?}");
    worker.shutdown().await;
}

/// A worker whose tools flap (here 400 times added and removed in two seconds) writes its
/// catalog entry at most once a pace, and the last state is the one every gateway ends with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_tools_flap_puts_its_catalog_at_most_once_a_pace_and_its_last_state_lands() {
    let nats = NatsServer::start();
    let (server, worker, gw) = calc_on_an_hourly_heartbeat(&nats.url()).await;
    let bus = connect(&nats.url()).await;
    let stream = format!("KV_{}", toolyard_nats::CATALOG_BUCKET);
    // The bucket's last write: this worker is its only writer.
    let revision = async || stream_state(&bus, &stream).await.last_sequence;
    let before = revision().await;
    let started = tokio::time::Instant::now();
    let flapping = || {
        tool_fn("flapping", "Comes and goes", |_ctx, a: Echo| async move {
            Ok(a.message)
        })
        .unwrap()
    };
    for _ in 0..400 {
        server.add_tools(vec![flapping()]);
        tokio::time::sleep(Duration::from_micros(2_500)).await;
        server.remove_tools(vec!["flapping".into()]);
        tokio::time::sleep(Duration::from_micros(2_500)).await;
    }
    server.add_tools(vec![tool_fn(
        "last",
        "Here to stay",
        |_ctx, a: Echo| async move { Ok(a.message) },
    )
    .unwrap()]);
    let names = listed(&gw.client, |n| n.iter().any(|t| t == "calc__last")).await;
    assert!(!names.iter().any(|t| t == "calc__flapping"), "{names:?}");
    // Nothing more is put once the flapping is over.
    tokio::time::sleep(toolyard_nats::EVENT_PACE * 3).await;
    let elapsed = started.elapsed();
    let puts = revision().await - before;
    let most = elapsed.as_millis() / toolyard_nats::EVENT_PACE.as_millis() + 2;
    assert!(
        u128::from(puts) <= most,
        "{puts} catalog writes in {elapsed:?} (at most {most}) for 801 changes"
    );
    let r = gw
        .client
        .call_tool("calc__last", json!({"message": "landed"}))
        .await
        .unwrap();
    assert_eq!(text(&r), "landed");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_rounds_whose_retries_land_on_another_worker_of_the_name_succeed() {
    use toolyard::proto::{ElicitAction, ElicitRequestParams, ElicitResult};
    let nats = NatsServer::start();
    // Two workers of one name sharing the state secret (`worker_server`): the queue group
    // spreads each round's request over them.
    let _a = start_worker(&nats.url(), "pair", Arc::default()).await;
    let _b = start_worker(&nats.url(), "pair", Arc::default()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "pair__ask")).await;
    let client = ClientBuilder::new(Implementation::new("pair-test", "1.0"))
        .protocol(ProtocolChoice::Modern)
        .request_timeout(WAIT)
        .on_elicit(Arc::new(|params: ElicitRequestParams| {
            Box::pin(async move {
                let first = serde_json::to_value(&params).unwrap()["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("First"));
                let mut content = toolyard::proto::JsonObject::new();
                content.insert("name".into(), json!(if first { "Ada" } else { "Lovelace" }));
                Ok(ElicitResult {
                    action: ElicitAction::Accept,
                    content: Some(content),
                    meta: None,
                    result_type: None,
                })
            })
        }))
        .connect(MemoryTransport::new(&gw.server))
        .await
        .unwrap();
    // Each call is three worker requests (no answer, one, two): across eight calls some
    // rounds are sealed by one worker and opened by the other.
    for _ in 0..8 {
        let r = client.call_tool("pair__ask", json!({})).await.unwrap();
        assert_eq!(text(&r), "Ada Lovelace", "{r:?}");
    }
}

/// A worker speaking the wire by hand (any NATS client can), answering every call with
/// `result`.
async fn hand_written_worker(url: &str, server: &str, tool: &str, result: &'static str) {
    let bus = connect(url).await;
    put_catalog_entry(&bus, server, "hand-1", &[tool]).await;
    let mut requests = bus
        .subscribe(toolyard_nats::wire::worker_subject("mcp.v1", server))
        .await
        .unwrap();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        while let Some(request) = requests.next().await {
            let Some(reply) = request.reply else { continue };
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(toolyard_nats::wire::FRAME, "end");
            headers.insert(toolyard_nats::wire::SEQ, "0");
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{result}}}"#);
            bus.publish_with_headers(reply, headers, body.into())
                .await
                .unwrap();
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_result_passes_through_the_gateway_as_it_came() {
    let nats = NatsServer::start();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    // What a typed parse would lose: a member our types do not know, an integer beyond
    // 64 bits, a number's spelling, the worker's own `_meta`.
    hand_written_worker(
        &nats.url(),
        "hand",
        "exact",
        r#"{"content":[{"type":"text","text":"x"}],"structuredContent":{"big":123456789012345678901234567890,"f":1.50},"x-future":{"kept":true},"_meta":{"w":1},"resultType":"complete"}"#,
    )
    .await;
    listed(&gw.client, |n| n.iter().any(|t| t == "hand__exact")).await;
    let args = serde_json::value::RawValue::from_string(r#"{"n":1}"#.into()).unwrap();
    let raw = gw
        .client
        .call_tool_raw("hand__exact", &args, &Default::default())
        .await
        .unwrap();
    let got = raw.get();
    assert!(
        got.contains(r#""structuredContent":{"big":123456789012345678901234567890,"f":1.50}"#),
        "{got}"
    );
    assert!(got.contains(r#""x-future":{"kept":true}"#), "{got}");
    assert!(got.contains(r#""_meta":{"w":1}"#), "{got}");
    // Our server states the result's kind once, in its caller's generation.
    assert!(got.matches("resultType").count() <= 1, "{got}");
    // The typed client still reads it.
    let typed = gw.client.call_tool("hand__exact", json!({})).await.unwrap();
    assert_eq!(text(&typed), "x");
}

/// The gateway sends a call a busy worker refused (-32015: not started) again with a
/// backoff, so callers of a worker with no room to wait are all served; past the call's
/// deadline the refusal is the caller's answer, naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_busy_worker_refuses_are_sent_again_until_they_run_or_their_deadline_passes() {
    let nats = NatsServer::start();
    let seen = Arc::new(Seen::default());
    let _worker = start_worker_with_slots(&nats.url(), "slow", seen.clone(), 1, Some(0)).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let client = gw.client.clone();
            tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 200})).await })
        })
        .collect();
    for call in calls {
        let r = tokio::time::timeout(WAIT, call)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(text(&r), "slept");
    }
    assert_eq!(seen.finished.load(Ordering::SeqCst), 3);
    // A call that finds the worker busy for longer than its deadline gets the refusal.
    let client = gw.client.clone();
    let long =
        tokio::spawn(async move { client.call_tool("slow__sleep", json!({"ms": 4_000})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = gateway(
        &nats.url(),
        RemoteConfig {
            call_timeout: Duration::from_secs(1),
            ..RemoteConfig::default()
        },
    )
    .await;
    listed(&short.client, |n| n.iter().any(|t| t == "slow__sleep")).await;
    let e = short
        .client
        .call_tool("slow__sleep", json!({"ms": 10}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("busy"), "{e}");
    assert!(format!("{e:?}").contains("-32015"), "{e:?}");
    let r = tokio::time::timeout(WAIT, long)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(text(&r), "slept");
    assert_eq!(
        seen.finished.load(Ordering::SeqCst),
        4,
        "the refused call ran"
    );
}

/// The first round's `requestState` of `tool` (the worker's `asker`: a first name, then a
/// last name), sealed where `client` is served.
async fn sealed_by(client: &RawClient, tool: &str, meta: &serde_json::Value) -> String {
    let asked = client
        .request(
            "tools/call",
            json!({"name": tool, "arguments": {}, "_meta": meta}),
        )
        .await
        .unwrap();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    asked["requestState"].as_str().unwrap().to_owned()
}

/// Whether `client`'s server opens `state` of `tool`: the retry goes on to the second
/// question.
async fn opens(client: &RawClient, tool: &str, state: &str, meta: &serde_json::Value) -> bool {
    let next = client
        .request(
            "tools/call",
            json!({
                "name": tool,
                "arguments": {},
                "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
                "requestState": state,
                "_meta": meta,
            }),
        )
        .await;
    next.is_ok_and(|next| next["inputRequests"].get("again").is_some())
}

/// Puts `secret` under `key` in the state-key bucket, as an operator rotating it does.
async fn put_state_key(url: &str, key: &str, secret: &str) {
    let kv = async_nats::jetstream::new(connect(url).await)
        .get_key_value(toolyard_nats::STATE_KEYS_BUCKET)
        .await
        .unwrap();
    kv.put(key, secret.to_owned().into()).await.unwrap();
}

/// A 2026-07-28 caller that can answer elicitations.
fn eliciting_caller() -> serde_json::Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    })
}

/// Gateways follow their shared state key as workers do: one given no secret takes a
/// secret put anew under `gateway`, so a caller's retry sealed with it (here by a gateway
/// given that secret) opens there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateways_state_key_put_anew_on_the_bus_is_taken_by_it() {
    let nats = NatsServer::start();
    let url = nats.url();
    let worker_server = toolyard::ServerBuilder::new("w", "1.0")
        .tool(asker("ask"))
        .start()
        .await
        .unwrap();
    let _worker = Worker::start(
        worker_server,
        connect(&url).await,
        WorkerConfig::new("calc"),
    )
    .await
    .unwrap();
    let shared = gateway(&url, quick()).await;
    listed(&shared.client, |t| t.iter().any(|n| n == "calc__ask")).await;
    let rotated = "a-new-gateway-secret";
    let given = toolyard::ServerBuilder::new("gateway", "1.0")
        .state_secret(rotated, Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let _given_remote = RemoteTools::start(given.clone(), connect(&url).await, quick())
        .await
        .unwrap();
    let (on_shared, on_given) = (
        RawClient::connect(&shared.server).await.unwrap(),
        RawClient::connect(&given).await.unwrap(),
    );
    let meta = eliciting_caller();
    let deadline = tokio::time::Instant::now() + WAIT;
    let new_state = loop {
        // The second gateway lists the worker's tool once it has read the catalog.
        let asked = on_given
            .request(
                "tools/call",
                json!({"name": "calc__ask", "arguments": {}, "_meta": meta}),
            )
            .await;
        if let Ok(asked) = asked {
            if let Some(state) = asked["requestState"].as_str() {
                break state.to_owned();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let before = sealed_by(&on_shared, "calc__ask", &meta).await;
    assert!(
        !opens(&on_shared, "calc__ask", &new_state, &meta).await,
        "not the gateways' shared key yet"
    );
    put_state_key(&url, "gateway", rotated).await;
    while !opens(&on_shared, "calc__ask", &new_state, &meta).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway never took the new key"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        opens(&on_shared, "calc__ask", &before, &meta).await,
        "what the replaced key sealed still opens"
    );
}

/// The shared state key is followed, not read once: a new secret put under the name's key
/// (an operator rotating it) is taken by every worker of the name, so state sealed with it
/// (here by a server given that secret) opens on them; and state they sealed with the key
/// it replaced still opens, so input rounds in flight finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_key_put_anew_on_the_bus_is_taken_by_every_worker_and_the_old_one_still_opens() {
    let nats = NatsServer::start();
    let url = nats.url();
    let asking = || {
        toolyard::ServerBuilder::new("w", "1.0")
            .tool(asker("ask"))
            .start()
    };
    let (a, b) = (asking().await.unwrap(), asking().await.unwrap());
    let _a = Worker::start(a.clone(), connect(&url).await, WorkerConfig::new("calc"))
        .await
        .unwrap();
    let _b = Worker::start(b.clone(), connect(&url).await, WorkerConfig::new("calc"))
        .await
        .unwrap();
    let (ca, cb) = (
        RawClient::connect(&a).await.unwrap(),
        RawClient::connect(&b).await.unwrap(),
    );
    let meta = eliciting_caller();
    let before = sealed_by(&ca, "ask", &meta).await;
    assert!(
        opens(&cb, "ask", &before, &meta).await,
        "the workers share a key"
    );

    let rotated = "a-new-secret-put-by-an-operator";
    let elsewhere = toolyard::ServerBuilder::new("w", "1.0")
        .state_secret(rotated, Duration::from_secs(600))
        .tool(asker("ask"))
        .start()
        .await
        .unwrap();
    let new_state = sealed_by(&RawClient::connect(&elsewhere).await.unwrap(), "ask", &meta).await;
    assert!(
        !opens(&ca, "ask", &new_state, &meta).await,
        "not the workers' key yet"
    );
    put_state_key(&url, "worker.calc", rotated).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !(opens(&ca, "ask", &new_state, &meta).await
        && opens(&cb, "ask", &new_state, &meta).await)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workers never took the new key"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        opens(&cb, "ask", &before, &meta).await,
        "what the replaced key sealed still opens"
    );
    assert!(!a.state_key_is_random() && !b.state_key_is_random());
}

/// Servers built without a state secret, made workers of one name, seal `requestState` with
/// the secret the first of them wrote to the bus (`TY_STATE_KEYS`, under the name), so an
/// input round's retry opens on whichever worker takes it; a server given a secret keeps it
/// and writes nothing there (the binary's test sends a round across two workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_given_no_state_secret_share_one_through_the_bus_and_a_given_one_is_kept() {
    let nats = NatsServer::start();
    let url = nats.url();
    let bare = || toolyard::ServerBuilder::new("w", "1.0").start();
    let (a, b) = (bare().await.unwrap(), bare().await.unwrap());
    assert!(a.state_key_is_random() && b.state_key_is_random());
    let _a = Worker::start(a.clone(), connect(&url).await, WorkerConfig::new("calc"))
        .await
        .unwrap();
    let _b = Worker::start(b.clone(), connect(&url).await, WorkerConfig::new("calc"))
        .await
        .unwrap();
    assert!(!a.state_key_is_random() && !b.state_key_is_random());
    let given = toolyard::ServerBuilder::new("w", "1.0")
        .state_secret("chosen", Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let _given = Worker::start(given.clone(), connect(&url).await, WorkerConfig::new("own"))
        .await
        .unwrap();
    assert!(!given.state_key_is_random());
    let kv = async_nats::jetstream::new(connect(&url).await)
        .get_key_value(toolyard_nats::STATE_KEYS_BUCKET)
        .await
        .unwrap();
    let secret = kv.get("worker.calc").await.unwrap().expect("calc's secret");
    assert_eq!(secret.len(), 64, "32 random bytes as hex");
    assert_eq!(
        kv.get("worker.own").await.unwrap(),
        None,
        "a given secret stays off the bus"
    );
}
