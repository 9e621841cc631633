//! Scoped pools: workers that take only one tenant's (or one user's) calls, gateways that
//! attribute their calls to a tenant and user, and the refusal of a pool that would run a
//! call a second time beside one already serving its server (N11).

use crate::*;
use async_nats::jetstream;
use futures_util::StreamExt;
use serde_json::json;
use toolyard_nats::{wire, NatsError, Scope, CATALOG_BUCKET};
use toolyard_testkit::NatsServer;

fn scope(tenant: Option<&str>, user: Option<&str>) -> Scope {
    Scope::of(tenant, user).unwrap()
}

/// A worker of `server` in the pool of `scope`, its calls counted in `seen`.
async fn pool_worker(
    url: &str,
    server: &str,
    scope: Scope,
    seen: Arc<Seen>,
) -> Result<Worker, NatsError> {
    let mut config = WorkerConfig::new(server);
    config.scope = scope;
    config.keepalive = Duration::from_millis(200);
    config.drain_timeout = Duration::from_millis(500);
    Worker::start(worker_server(seen).await, connect(url).await, config).await
}

/// A gateway whose calls carry `caller`'s tenant and user.
async fn gateway_of(url: &str, caller: Scope) -> Gateway {
    gateway(
        url,
        RemoteConfig {
            caller,
            ..RemoteConfig::default()
        },
    )
    .await
}

async fn sleep_once(gw: &Gateway, tool: &str) {
    let r = gw.client.call_tool(tool, json!({"ms": 1})).await.unwrap();
    assert_eq!(r.is_error, None, "{r:?}");
}

/// The catalog keys of `server`'s instances.
async fn instances(bus: &async_nats::Client, server: &str) -> Vec<String> {
    let kv = jetstream::new(bus.clone())
        .get_key_value(CATALOG_BUCKET)
        .await
        .unwrap();
    let prefix = format!("srv.{server}.");
    kv.keys()
        .await
        .unwrap()
        .filter_map(|k| async move { k.ok() })
        .filter(|k| std::future::ready(k.starts_with(&prefix)))
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_lists_and_calls_only_the_pools_that_take_its_tenant_and_user() {
    let nats = NatsServer::start();
    let url = nats.url();
    let (acme, beta, bob, shared) = (
        Arc::new(Seen::default()),
        Arc::new(Seen::default()),
        Arc::new(Seen::default()),
        Arc::new(Seen::default()),
    );
    let _acme = pool_worker(&url, "calc", scope(Some("acme"), None), acme.clone())
        .await
        .unwrap();
    let _beta = pool_worker(&url, "calc", scope(Some("beta"), None), beta.clone())
        .await
        .unwrap();
    let _bob = pool_worker(&url, "desk", scope(Some("acme"), Some("bob")), bob.clone())
        .await
        .unwrap();
    let _shared = pool_worker(&url, "shared", Scope::every(), shared.clone())
        .await
        .unwrap();

    let g_acme = gateway_of(&url, scope(Some("acme"), None)).await;
    let g_beta = gateway_of(&url, scope(Some("beta"), None)).await;
    let g_bob = gateway_of(&url, scope(Some("acme"), Some("bob"))).await;
    let g_eve = gateway_of(&url, scope(Some("acme"), Some("eve"))).await;
    let g_none = gateway_of(&url, Scope::every()).await;
    let has = |names: &[String], tool: &str| names.iter().any(|n| n == tool);
    // Each lists the pools that take its calls, and only those.
    let names = listed(&g_acme.client, |n| {
        has(n, "calc__sleep") && has(n, "shared__sleep")
    })
    .await;
    assert!(!has(&names, "desk__sleep"), "{names:?}");
    let names = listed(&g_bob.client, |n| {
        has(n, "calc__sleep") && has(n, "desk__sleep") && has(n, "shared__sleep")
    })
    .await;
    assert!(has(&names, "desk__echo"), "{names:?}");
    let names = listed(&g_eve.client, |n| {
        has(n, "calc__sleep") && has(n, "shared__sleep")
    })
    .await;
    assert!(
        !has(&names, "desk__sleep"),
        "bob's pool is not eve's: {names:?}"
    );
    listed(&g_beta.client, |n| has(n, "calc__sleep")).await;
    let names = listed(&g_none.client, |n| has(n, "shared__sleep")).await;
    assert!(
        !has(&names, "calc__sleep") && !has(&names, "desk__sleep"),
        "an unattributed gateway sees no tenant's pool: {names:?}"
    );

    // Each call runs on its caller's pool.
    sleep_once(&g_acme, "calc__sleep").await;
    sleep_once(&g_bob, "calc__sleep").await;
    sleep_once(&g_eve, "calc__sleep").await;
    sleep_once(&g_beta, "calc__sleep").await;
    sleep_once(&g_bob, "desk__sleep").await;
    sleep_once(&g_none, "shared__sleep").await;
    sleep_once(&g_beta, "shared__sleep").await;
    let finished = |s: &Seen| s.finished.load(Ordering::SeqCst);
    assert_eq!(
        [&acme, &beta, &bob, &shared].map(|s| finished(s)),
        [3, 1, 1, 2],
        "acme's calls (its users' too) on acme's pool, beta's on beta's, bob's desk on his"
    );

    // Prompts and resources travel as the caller's too: bob's greeting from his desk's
    // pool, and an item read through eve's gateway from acme's pool of `calc` (the first of
    // the pools offering that template keeps it).
    let greeting = g_bob
        .client
        .get_prompt("desk__greet", json!({"name": "Bob"}))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&greeting.messages).unwrap()[0]["content"]["text"],
        "Hello, Bob!"
    );
    let item = g_eve
        .client
        .read_resource("worker://items/7")
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&item.contents).unwrap()[0]["text"],
        "item 7"
    );

    // A tenant's pool takes nothing unattributed, nor another tenant's: no responders.
    let raw = connect(&url).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "x"}}})
    .to_string();
    for (tenant, user) in [(None, None), (Some("gamma"), None)] {
        let subject = wire::request_subject_for(
            wire::DEFAULT_PREFIX,
            &Scope::of(tenant, user).unwrap(),
            "calc",
            "tools/call",
            Some("echo"),
        );
        let err = raw
            .request(subject.clone(), body.clone().into())
            .await
            .unwrap_err();
        assert_eq!(
            err.kind(),
            async_nats::client::RequestErrorKind::NoResponders,
            "{subject}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_overlapping_one_already_serving_its_server_refuses_to_start_and_each_call_runs_once(
) {
    let nats = NatsServer::start();
    let url = nats.url();
    let bus = connect(&url).await;
    let every = Arc::new(Seen::default());
    let _every = pool_worker(&url, "calc", Scope::every(), every.clone())
        .await
        .unwrap();
    // A tenant's pool beside the pool of every caller would take each of its calls too.
    let refused = pool_worker(&url, "calc", scope(Some("acme"), None), Arc::default())
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(refused, NatsError::Config(_))
            && message.contains("tenant acme")
            && message.contains("every caller")
            && message.contains("twice"),
        "{message}"
    );
    assert_eq!(
        instances(&bus, "calc").await.len(),
        1,
        "the refused worker's catalog entry is gone"
    );
    // Had it subscribed, NATS would have given it each of acme's calls beside the running
    // pool: a subscriber in its queue group gets the very request the running pool answers.
    let mut shadow = bus
        .queue_subscribe(
            scope(Some("acme"), None).worker_subject(wire::DEFAULT_PREFIX, "calc"),
            scope(Some("acme"), None).queue_group("calc"),
        )
        .await
        .unwrap();
    bus.flush().await.unwrap();
    let g_acme = gateway_of(&url, scope(Some("acme"), None)).await;
    listed(&g_acme.client, |n| n.iter().any(|t| t == "calc__sleep")).await;
    sleep_once(&g_acme, "calc__sleep").await;
    let doubled = tokio::time::timeout(WAIT, shadow.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        doubled.subject.as_str().ends_with(".calc.tools.call.sleep"),
        "{}",
        doubled.subject
    );
    drop(shadow);
    // The refusal kept it to one run.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(every.finished.load(Ordering::SeqCst), 1);

    // The other way round: a tenant's pool serving refuses the pool of every caller and its
    // own users' pools; another tenant's pool and another server's are welcome.
    let acme = Arc::new(Seen::default());
    let _acme = pool_worker(&url, "tools", scope(Some("acme"), None), acme.clone())
        .await
        .unwrap();
    for late in [Scope::every(), scope(Some("acme"), Some("bob"))] {
        let err = pool_worker(&url, "tools", late.clone(), Arc::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("overlaps"), "{late}: {err}");
    }
    let _beta = pool_worker(&url, "tools", scope(Some("beta"), None), Arc::default())
        .await
        .unwrap();
    // A second worker of the same pool is more capacity, never refused.
    let _acme_too = pool_worker(&url, "tools", scope(Some("acme"), None), acme.clone())
        .await
        .unwrap();
    let g_bob = gateway_of(&url, scope(Some("acme"), Some("bob"))).await;
    listed(&g_bob.client, |n| n.iter().any(|t| t == "tools__sleep")).await;
    for _ in 0..4 {
        sleep_once(&g_bob, "tools__sleep").await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        acme.finished.load(Ordering::SeqCst),
        4,
        "each call ran once"
    );
    assert_eq!(instances(&bus, "tools").await.len(), 3);
}

/// A scope set by hand (its fields are public) is checked as `Scope::of` checks it, on both
/// sides, before anything subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_that_is_no_subject_token_is_refused_by_worker_and_gateway() {
    let nats = NatsServer::start();
    let wild = Scope {
        tenant: Some("acme.*".into()),
        user: None,
    };
    let err = pool_worker(&nats.url(), "calc", wild.clone(), Arc::default())
        .await
        .unwrap_err();
    assert!(matches!(err, NatsError::Config(_)), "{err}");
    let server = toolyard::ServerBuilder::new("gateway", "1.0")
        .start()
        .await
        .unwrap();
    let config = RemoteConfig {
        caller: wild,
        ..RemoteConfig::default()
    };
    let err = RemoteTools::start(server, connect(&nats.url()).await, config)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("acme.*"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_overlapping_pools_starting_at_once_exactly_one_serves() {
    let nats = NatsServer::start();
    let url = nats.url();
    let bus = connect(&url).await;
    for round in 0..6 {
        let server = format!("race{round}");
        let (a, b) = tokio::join!(
            pool_worker(&url, &server, Scope::every(), Arc::default()),
            pool_worker(&url, &server, scope(Some("acme"), None), Arc::default()),
        );
        let started = [a.is_ok(), b.is_ok()];
        assert_eq!(
            started.iter().filter(|s| **s).count(),
            1,
            "round {round}: exactly one of two overlapping pools serves ({a:?} / {b:?})"
        );
        assert_eq!(instances(&bus, &server).await.len(), 1, "round {round}");
    }
}

/// Regression of the gap the start check leaves: a pool that started while an overlapping
/// pool's entry was missing from the catalog (its only worker cut off until the entry
/// expired, N2; here the entry is deleted by hand, as its expiry would) served beside it
/// once that pool was back, and NATS gave each call both take to both until the later pool
/// was restarted. The later pool now checks at every heartbeat, and gives way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_finds_an_earlier_overlapping_pool_back_gives_way_and_each_call_runs_once() {
    let nats = NatsServer::start();
    let url = nats.url();
    let bus = connect(&url).await;
    let every = Arc::new(Seen::default());
    let every_server = worker_server(every.clone()).await;
    let mut config = WorkerConfig::new("calc");
    // Its entry is put again only when its tools change, not on a beat, within this test.
    config.heartbeat = Duration::from_secs(3600);
    let earlier = Worker::start(every_server.clone(), connect(&url).await, config)
        .await
        .unwrap();
    let kv = jetstream::new(bus.clone())
        .get_key_value(CATALOG_BUCKET)
        .await
        .unwrap();
    kv.delete(format!("srv.calc.{}", earlier.instance()))
        .await
        .unwrap();

    // acme's pool starts: the check at start cannot see the pool of every caller.
    let acme = Arc::new(Seen::default());
    let mut config = WorkerConfig::new("calc");
    config.scope = scope(Some("acme"), None);
    config.heartbeat = Duration::from_millis(200);
    config.drain_timeout = Duration::from_millis(500);
    let later = Worker::start(
        worker_server(acme.clone()).await,
        connect(&url).await,
        config,
    )
    .await
    .unwrap();
    assert_eq!(instances(&bus, "calc").await.len(), 1);

    // The pool of every caller is back in the catalog (a change of its tools puts its entry
    // at once, with the revision it joined at).
    every_server.add_tools(vec![tool_fn(
        "late",
        "Added later",
        |_ctx, a: Echo| async move { Ok(a.message) },
    )
    .unwrap()]);
    let why = tokio::time::timeout(WAIT, later.gave_way())
        .await
        .expect("the later pool gives way within a heartbeat");
    let message = why.to_string();
    assert!(
        matches!(why, NatsError::Config(_))
            && message.contains("tenant acme")
            && message.contains("every caller")
            && message.contains(earlier.instance()),
        "{message}"
    );
    assert_eq!(
        instances(&bus, "calc").await,
        vec![format!("srv.calc.{}", earlier.instance())],
        "the pool that gave way deleted its entry"
    );

    // acme's calls now run once, on the pool that joined first.
    let ran_before = acme.finished.load(Ordering::SeqCst);
    let g_acme = gateway_of(&url, scope(Some("acme"), None)).await;
    listed(&g_acme.client, |n| n.iter().any(|t| t == "calc__sleep")).await;
    for _ in 0..4 {
        sleep_once(&g_acme, "calc__sleep").await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        every.finished.load(Ordering::SeqCst),
        4,
        "each call ran once"
    );
    assert_eq!(acme.finished.load(Ordering::SeqCst), ran_before);
    later.shutdown().await;
    earlier.shutdown().await;
}

/// The overlap check at every heartbeat reads the entries of its server's other instances;
/// an instance's scope and when it joined never change, so one read and found to leave the
/// pool be is not read again: two workers of one pool, a few heartbeats in, ask the stream
/// for no entry at all (before, each asked for the other's at every beat: one request per
/// instance per beat, for every worker of the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overlap_check_reads_an_instance_that_has_joined_once_not_at_every_heartbeat() {
    let nats = NatsServer::start();
    let url = nats.url();
    let spy = connect(&url).await;
    let mut gets = spy
        .subscribe(format!("$JS.API.STREAM.MSG.GET.KV_{CATALOG_BUCKET}"))
        .await
        .unwrap();
    spy.flush().await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let mut config = WorkerConfig::new("calc");
        // The shortest the bucket takes (its delete markers live a heartbeat).
        config.heartbeat = Duration::from_secs(1);
        workers.push(
            Worker::start(
                worker_server(Arc::default()).await,
                connect(&url).await,
                config,
            )
            .await
            .unwrap(),
        );
    }
    // Each has read the other's entry once it had joined (its second put, a beat in).
    let mut read = 0;
    let settled = tokio::time::Instant::now() + Duration::from_millis(3500);
    while tokio::time::timeout_at(settled, gets.next()).await.is_ok() {
        read += 1;
    }
    assert!(
        read >= 2,
        "each worker read the other's entry: {read} reads"
    );
    // Four more heartbeats each.
    let quiet = tokio::time::Instant::now() + Duration::from_secs(4);
    let mut again = 0;
    while tokio::time::timeout_at(quiet, gets.next()).await.is_ok() {
        again += 1;
    }
    assert_eq!(again, 0, "entries read again at later heartbeats");
    for worker in workers {
        worker.shutdown().await;
    }
}
