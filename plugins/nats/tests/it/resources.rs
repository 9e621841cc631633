//! A worker's resources, resource templates and prompts through the gateway: listed, read and
//! got over the bus in both generations, gone with the worker, a URI kept by the first worker
//! offering it, and a resource update raised on a worker reaching a gateway's subscriber.

use crate::*;
use serde_json::json;
use std::future::Future;
use toolyard::client::ClientError;
use toolyard::proto::{
    CacheScope, ContentBlock, GetPromptResult, ProtocolVersion, ReadResourceResult,
    ResourceContents, SubscriptionFilter,
};
use toolyard_testkit::NatsServer;

/// Polls `probe` until it gives something (bounded by [`WAIT`]).
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn read_text(read: &ReadResourceResult) -> String {
    read.contents
        .iter()
        .filter_map(|c| match c {
            ResourceContents::Text(t) => Some(t.text.as_str()),
            ResourceContents::Blob(_) => None,
        })
        .collect()
}

fn prompt_text(got: &GetPromptResult) -> String {
    got.messages
        .iter()
        .filter_map(|m| match &m.content {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

async fn client_of(server: &Server, choice: ProtocolChoice) -> Client {
    ClientBuilder::new(Implementation::new("resources-test", "1.0"))
        .protocol(choice)
        .request_timeout(WAIT)
        .connect(MemoryTransport::new(server))
        .await
        .unwrap()
}

/// The gateway's resource URIs, template URIs and prompt names now.
async fn offered(client: &Client) -> (Vec<String>, Vec<String>, Vec<String>) {
    let resources = client.list_all_resources().await.unwrap();
    let templates = client.list_all_resource_templates().await.unwrap();
    let prompts = client.list_all_prompts().await.unwrap();
    (
        resources.into_iter().map(|r| r.uri).collect(),
        templates.into_iter().map(|t| t.uri_template).collect(),
        prompts.into_iter().map(|p| p.name).collect(),
    )
}

const BOTH: [ProtocolChoice; 2] = [
    ProtocolChoice::Modern,
    ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_resources_templates_and_prompts_are_listed_read_and_got_through_the_gateway() {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "docs", Arc::default()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    for choice in BOTH {
        let client = client_of(&gw.server, choice).await;
        let (resources, templates, prompts) = until("the worker's offer is listed", || async {
            let found = offered(&client).await;
            (!found.0.is_empty()).then_some(found)
        })
        .await;
        // URIs as the worker has them; the prompt named like a tool.
        assert_eq!(resources, vec!["worker://readme"], "{choice:?}");
        assert_eq!(templates, vec!["worker://items/{id}"], "{choice:?}");
        assert_eq!(prompts, vec!["docs__greet"], "{choice:?}");
        let readme = client.read_resource("worker://readme").await.unwrap();
        assert_eq!(read_text(&readme), "read me", "{choice:?}");
        // The worker's result whole: its `_meta`, and its caching hints for a 2026-07-28
        // caller (a legacy one gets none); a result without hints gets the gateway's.
        assert_eq!(
            readme.meta,
            json!({"source": "the worker"}).as_object().cloned(),
            "{choice:?}"
        );
        let modern = matches!(choice, ProtocolChoice::Modern);
        assert_eq!(readme.ttl_ms, modern.then_some(1), "{choice:?}");
        assert_eq!(
            readme.cache_scope,
            modern.then_some(CacheScope::Public),
            "{choice:?}"
        );
        // A URI of the template: the worker matches it and reads it.
        let item = client.read_resource("worker://items/42").await.unwrap();
        assert_eq!(read_text(&item), "item 42", "{choice:?}");
        assert_eq!(item.meta, None, "{choice:?}");
        assert_eq!(
            item.cache_scope,
            modern.then_some(CacheScope::Private),
            "{choice:?}"
        );
        let greeting = client
            .get_prompt("docs__greet", json!({"name": "Ada"}))
            .await
            .unwrap();
        assert_eq!(prompt_text(&greeting), "Hello, Ada!", "{choice:?}");
        assert_eq!(
            greeting.description.as_deref(),
            Some("A greeting"),
            "{choice:?}"
        );
    }
    assert_eq!(gw.remote.resources(), vec!["worker://readme"]);
    assert_eq!(gw.remote.resource_templates(), vec!["worker://items/{id}"]);
    assert_eq!(gw.remote.prompts(), vec!["docs__greet"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_prefix_prompts_keep_their_own_names() {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "docs", Arc::default()).await;
    let config = RemoteConfig {
        separator: None,
        ..RemoteConfig::default()
    };
    let gw = gateway(&nats.url(), config).await;
    let prompts = until("the prompt is listed", || async {
        let prompts = gw.client.list_all_prompts().await.unwrap();
        (!prompts.is_empty()).then_some(prompts)
    })
    .await;
    assert_eq!(prompts[0].name, "greet");
    let got = gw
        .client
        .get_prompt("greet", json!({"name": "Grace"}))
        .await
        .unwrap();
    assert_eq!(prompt_text(&got), "Hello, Grace!");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_from_a_workers_resource_reader_reaches_the_caller_as_a_json_rpc_error_and_a_uri_no_header_carries_is_refused(
) {
    let nats = NatsServer::start();
    let _worker = start_worker(&nats.url(), "docs", Arc::default()).await;
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    for choice in BOTH {
        let client = client_of(&gw.server, choice).await;
        until("the template is listed", || async {
            let t = client.list_all_resource_templates().await.unwrap();
            (!t.is_empty()).then_some(())
        })
        .await;
        let failed: ClientError = client
            .read_resource("worker://items/broken")
            .await
            .unwrap_err();
        let error = failed
            .rpc()
            .unwrap_or_else(|| panic!("{choice:?}: not a JSON-RPC error: {failed}"));
        // The worker's answer as it gave it: an internal error with the reader's message,
        // not one of the bridge's codes.
        assert_eq!(error.code, -32603, "{choice:?}: {error:?}");
        assert_eq!(error.message, "the item store is down", "{choice:?}");
        // A URI a NATS header cannot carry (`Mcp-Name`) is refused before it is sent.
        let refused = client
            .read_resource("worker://items/a\nb")
            .await
            .unwrap_err();
        let error = refused.rpc().unwrap_or_else(|| panic!("{refused}"));
        assert_eq!(error.code, -32602, "{choice:?}: {error:?}");
        assert!(
            error.message.contains("line break"),
            "{choice:?}: {error:?}"
        );
        // The gateway still serves after both.
        let item = client.read_resource("worker://items/7").await.unwrap();
        assert_eq!(read_text(&item), "item 7");
    }
}

/// Reads notifications until each of `want` came (bounded by [`WAIT`]).
async fn hear(changes: &mut toolyard::client::Subscription, want: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut heard = std::collections::BTreeSet::new();
    while !want.iter().all(|w| heard.contains(*w)) {
        let next = tokio::time::timeout_at(deadline, changes.next()).await;
        let Ok(Some(notice)) = next else {
            panic!("never heard all of {want:?}, only {heard:?}");
        };
        heard.insert(notice.method);
    }
}

const LISTS_CHANGED: [&str; 2] = [
    "notifications/resources/list_changed",
    "notifications/prompts/list_changed",
];

fn list_changes() -> SubscriptionFilter {
    SubscriptionFilter {
        resources_list_changed: Some(true),
        prompts_list_changed: Some(true),
        ..SubscriptionFilter::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_going_away_takes_its_resources_and_prompts_with_it_and_listeners_hear_of_it() {
    let nats = NatsServer::start();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let client = client_of(&gw.server, ProtocolChoice::Modern).await;
    let mut arrival = client.subscribe(list_changes()).await.unwrap();
    let worker = start_worker(&nats.url(), "docs", Arc::default()).await;
    hear(&mut arrival, &LISTS_CHANGED).await;
    drop(arrival);
    until("the worker's offer is listed", || async {
        let found = offered(&client).await;
        (!found.0.is_empty() && !found.1.is_empty() && !found.2.is_empty()).then_some(())
    })
    .await;
    // Listening from now on: what the arrival raised was published before the listing had
    // it, so only the departure is heard here.
    let mut departure = client.subscribe(list_changes()).await.unwrap();
    worker.shutdown().await;
    hear(&mut departure, &LISTS_CHANGED).await;
    let found = offered(&client).await;
    assert!(
        found.0.is_empty() && found.1.is_empty() && found.2.is_empty(),
        "{found:?}"
    );
    let gone = client.read_resource("worker://readme").await.unwrap_err();
    assert!(
        gone.rpc().is_some_and(|e| e.message.contains("not found")),
        "{gone}"
    );
    let gone = client.read_resource("worker://items/1").await.unwrap_err();
    assert!(gone.rpc().is_some(), "{gone}");
    let gone = client
        .get_prompt("docs__greet", json!({"name": "Ada"}))
        .await
        .unwrap_err();
    assert!(gone.rpc().is_some(), "{gone}");
    assert!(gw.remote.resources().is_empty() && gw.remote.prompts().is_empty());
    assert!(gw.remote.resource_templates().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uri_two_workers_offer_is_kept_by_the_first_and_passes_to_the_other_when_it_leaves() {
    let nats = NatsServer::start();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let config = |name: &str| {
        let mut config = WorkerConfig::new(name);
        config.keepalive = Duration::from_millis(200);
        config
    };
    let first = Worker::start(
        worker_server_reading(Arc::default(), "from first").await,
        connect(&nats.url()).await,
        config("zeta"),
    )
    .await
    .unwrap();
    until("the first worker's readme is read", || async {
        let read = gw.client.read_resource("worker://readme").await.ok()?;
        (read_text(&read) == "from first").then_some(())
    })
    .await;
    // The second sorts before the first by name: it still does not take the URI over.
    let _second = Worker::start(
        worker_server_reading(Arc::default(), "from second").await,
        connect(&nats.url()).await,
        config("alpha"),
    )
    .await
    .unwrap();
    until("the second worker's prompt is listed", || async {
        let prompts = gw.client.list_all_prompts().await.unwrap();
        prompts
            .iter()
            .any(|p| p.name == "alpha__greet")
            .then_some(())
    })
    .await;
    let read = gw.client.read_resource("worker://readme").await.unwrap();
    assert_eq!(read_text(&read), "from first");
    let listed = gw.client.list_all_resources().await.unwrap();
    assert_eq!(listed.len(), 1, "one URI, listed once: {listed:?}");
    // Its prompt, named by its server, clashes with nothing.
    let got = gw
        .client
        .get_prompt("alpha__greet", json!({"name": "Ada"}))
        .await
        .unwrap();
    assert_eq!(prompt_text(&got), "Hello, Ada!");
    first.shutdown().await;
    until("the URI passes to the second worker", || async {
        let read = gw.client.read_resource("worker://readme").await.ok()?;
        (read_text(&read) == "from second").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_update_raised_on_a_worker_reaches_the_gateways_subscribers_in_both_generations()
{
    let nats = NatsServer::start();
    let worker_server = worker_server(Arc::default()).await;
    let _worker_events = toolyard_nats::EventRelay::start(
        worker_server.clone(),
        connect(&nats.url()).await,
        "mcp.v1",
    )
    .await
    .unwrap();
    let _worker = Worker::start(
        worker_server.clone(),
        connect(&nats.url()).await,
        WorkerConfig::new("docs"),
    )
    .await
    .unwrap();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let _gateway_events =
        toolyard_nats::EventRelay::start(gw.server.clone(), connect(&nats.url()).await, "mcp.v1")
            .await
            .unwrap();
    for choice in BOTH {
        let client = client_of(&gw.server, choice).await;
        until("the worker's resource is listed", || async {
            let r = client.list_all_resources().await.unwrap();
            (!r.is_empty()).then_some(())
        })
        .await;
        let mut updates = client
            .subscribe(SubscriptionFilter {
                resource_subscriptions: Some(vec!["worker://readme".into()]),
                ..SubscriptionFilter::default()
            })
            .await
            .unwrap();
        // Raised on the worker until one arrives: the relay's subscriptions may still be on
        // their way to the broker.
        let deadline = tokio::time::Instant::now() + WAIT;
        let updated = loop {
            worker_server.notify_resource_updated("worker://readme");
            let next = tokio::time::timeout(Duration::from_millis(200), async {
                loop {
                    match updates.next().await {
                        Some(n) if n.method == "notifications/resources/updated" => break Some(n),
                        Some(_) => continue,
                        None => break None,
                    }
                }
            })
            .await;
            match next {
                Ok(Some(n)) => break n,
                Ok(None) => panic!("{choice:?}: the client closed"),
                Err(_) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "{choice:?}: the update never reached the gateway's subscriber"
                ),
            }
        };
        assert_eq!(updated.params["uri"], "worker://readme", "{choice:?}");
        // And the subscriber reads the new state through the gateway.
        let read = client.read_resource("worker://readme").await.unwrap();
        assert_eq!(read_text(&read), "read me");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_changing_what_it_offers_changes_the_gateway_before_its_next_heartbeat() {
    use toolyard::proto::{GetPromptResult, Prompt, PromptMessage, Role};
    let nats = NatsServer::start();
    let server = worker_server(Arc::default()).await;
    let mut config = WorkerConfig::new("docs");
    // No heartbeat within the test: only the change itself can tell the gateway.
    config.heartbeat = Duration::from_secs(3600);
    let _worker = Worker::start(server.clone(), connect(&nats.url()).await, config)
        .await
        .unwrap();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    until("the worker's offer is listed", || async {
        let found = offered(&gw.client).await;
        (found.2 == ["docs__greet"] && !found.0.is_empty()).then_some(())
    })
    .await;
    server.add_prompts(vec![toolyard::PromptDef::new(
        Prompt {
            name: "farewell".into(),
            ..Default::default()
        },
        Arc::new(|_ctx, _args| {
            Box::pin(async move {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::text(Role::User, "Goodbye!")],
                    meta: None,
                    result_type: None,
                })
            })
        }),
    )]);
    server.remove_resources(vec!["worker://readme".into()]);
    until("the change reaches the gateway", || async {
        let mut found = offered(&gw.client).await;
        found.2.sort();
        (found.0.is_empty() && found.2 == ["docs__farewell", "docs__greet"]).then_some(())
    })
    .await;
    let got = gw
        .client
        .get_prompt("docs__farewell", json!({}))
        .await
        .unwrap();
    assert_eq!(prompt_text(&got), "Goodbye!");
}

/// `completion/complete` for a worker's prompt argument and template variable, asked of the
/// gateway (exposed names), is forwarded over the bus to the worker (upstream names) and
/// answers with the worker's values, `total` and `hasMore`, in both generations; the
/// arguments already filled in reach the worker's completer. A worker that is gone (its
/// catalog entry not expired yet) completes to nothing, at once, not to an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_completers_answer_through_the_gateway_and_a_gone_worker_completes_to_nothing() {
    use toolyard::proto::{
        CompleteArgument, CompleteContext, CompleteReference, CompleteRequestParams,
        PromptReference, ResourceTemplateReference,
    };
    use toolyard::{CompletionTarget, Completions};
    let nats = NatsServer::start();
    let served = worker_server(Arc::default()).await;
    served.add_completer(
        CompletionTarget::Prompt("greet".into(), "name".into()),
        Arc::new(|_ctx, value: String, _context| {
            Box::pin(async move {
                let names = ["Ada", "Alan", "Grace"];
                Completions {
                    values: names
                        .iter()
                        .filter(|n| n.starts_with(&value))
                        .map(|n| (*n).to_owned())
                        .collect(),
                    total: Some(42),
                    has_more: Some(true),
                }
            })
        }),
    );
    served.add_completer(
        CompletionTarget::Resource("worker://items/{id}".into(), "id".into()),
        Arc::new(
            |_ctx, value: String, context: std::collections::HashMap<String, String>| {
                Box::pin(async move {
                    let shelf = context.get("shelf").cloned().unwrap_or_default();
                    Completions::from(vec![format!("{value}2 on {shelf}")])
                })
            },
        ),
    );
    let bus = connect(&nats.url()).await;
    let mut config = WorkerConfig::new("docs");
    config.keepalive = Duration::from_millis(200);
    let _worker = Worker::start(served, bus.clone(), config).await.unwrap();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    let prompt = |value: &str| CompleteRequestParams {
        meta: None,
        r#ref: CompleteReference::Prompt(PromptReference {
            name: "docs__greet".into(),
            title: None,
        }),
        argument: CompleteArgument {
            name: "name".into(),
            value: value.into(),
        },
        context: None,
    };
    for choice in BOTH {
        let client = client_of(&gw.server, choice).await;
        until("the prompt is listed", || async {
            let found = offered(&client).await;
            found.2.contains(&"docs__greet".to_owned()).then_some(())
        })
        .await;
        let names = client.complete(prompt("A")).await.unwrap().completion;
        assert_eq!(names.values, vec!["Ada", "Alan"], "{choice:?}");
        assert_eq!(names.total, Some(42), "the worker's total: {choice:?}");
        assert_eq!(
            names.has_more,
            Some(true),
            "the worker's hasMore: {choice:?}"
        );
        let ids = client
            .complete(CompleteRequestParams {
                meta: None,
                r#ref: CompleteReference::ResourceTemplate(ResourceTemplateReference {
                    uri: "worker://items/{id}".into(),
                }),
                argument: CompleteArgument {
                    name: "id".into(),
                    value: "4".into(),
                },
                context: Some(CompleteContext {
                    arguments: Some([("shelf".to_owned(), "top".to_owned())].into()),
                }),
            })
            .await
            .unwrap()
            .completion;
        assert_eq!(ids.values, vec!["42 on top"], "{choice:?}");
    }
    // The worker's connection goes away; its catalog entry stays until it expires, so the
    // prompt is still offered, and completing it is nothing (no responders), not an error.
    bus.drain().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let nothing = gw.client.complete(prompt("A")).await.unwrap().completion;
    assert!(nothing.values.is_empty(), "{nothing:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// Records what the process's outgoing requests were: (method, server, outcome).
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(String, Option<String>, String)>>);

/// The process-wide observer: hands each request to the recorder.
struct Observer(Arc<Recorder>);

struct Recorded {
    recorder: Arc<Recorder>,
    method: String,
    server: Option<String>,
    /// The trace the request was made in (`00-{trace id}`), if any.
    trace: Option<String>,
}

impl toolyard::client::RequestObserver for Observer {
    fn start(
        &self,
        request: &toolyard::client::OutgoingRequest<'_>,
    ) -> Option<Box<dyn toolyard::client::ObservedRequest>> {
        Some(Box::new(Recorded {
            recorder: self.0.clone(),
            method: request.method.to_owned(),
            server: request.server.map(str::to_owned),
            trace: request
                .traceparent
                .and_then(|p| p.get(..35))
                .map(str::to_owned),
        }))
    }
}

impl toolyard::client::ObservedRequest for Recorded {
    /// A span of its own, in the request's trace when it was made in one (as a CLIENT
    /// span is a child of the caller's).
    fn trace_context(&self) -> Option<(String, Option<String>)> {
        let trace = self.trace.as_deref();
        let trace = trace.unwrap_or("00-0af7651916cd43dd8448eb211c80319c");
        Some((format!("{trace}-b7ad6b7169203331-01"), None))
    }
    fn finish(self: Box<Self>, outcome: toolyard::client::RequestOutcome<'_>) {
        self.recorder
            .0
            .lock()
            .unwrap()
            .push((self.method, self.server, format!("{outcome:?}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_completion_is_an_observed_client_request_like_every_other() {
    use toolyard::proto::{
        CompleteArgument, CompleteReference, CompleteRequestParams, PromptReference,
    };
    use toolyard::{CompletionTarget, Completions};
    // This test's own process: the observer sees every outgoing request of it.
    let recorder = Arc::new(Recorder::default());
    assert!(toolyard::client::set_default_observer(Arc::new(Observer(
        recorder.clone()
    ))));
    let nats = NatsServer::start();
    let served = worker_server(Arc::default()).await;
    // The trace context the worker's completer was asked in.
    let asked_in: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let seen_by_worker = asked_in.clone();
    served.add_completer(
        CompletionTarget::Prompt("greet".into(), "name".into()),
        Arc::new(
            move |ctx: toolyard::RequestContext, _value: String, _context| {
                *seen_by_worker.lock().unwrap() = ctx.traceparent().map(str::to_owned);
                Box::pin(async move { Completions::from(vec!["Ada".to_owned()]) })
            },
        ),
    );
    let _worker = Worker::start(
        served,
        connect(&nats.url()).await,
        WorkerConfig::new("docs"),
    )
    .await
    .unwrap();
    let gw = gateway(&nats.url(), RemoteConfig::default()).await;
    until("the prompt is listed", || async {
        let found = offered(&gw.client).await;
        found.2.contains(&"docs__greet".to_owned()).then_some(())
    })
    .await;
    let names = gw
        .client
        .complete(CompleteRequestParams {
            meta: serde_json::from_value(json!({"traceparent": CALLER_TRACEPARENT})).ok(),
            r#ref: CompleteReference::Prompt(PromptReference {
                name: "docs__greet".into(),
                title: None,
            }),
            argument: CompleteArgument {
                name: "name".into(),
                value: "A".into(),
            },
            context: None,
        })
        .await
        .unwrap()
        .completion;
    assert_eq!(names.values, vec!["Ada"]);
    let seen = recorder.0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|(m, s, o)| m == "completion/complete"
            && s.as_deref() == Some("docs")
            && o == "Ok"),
        "the gateway's completion request to the worker was observed: {seen:?}"
    );
    // In the caller's trace: the worker's completer was asked in it.
    let asked_in = asked_in.lock().unwrap().clone().unwrap_or_default();
    assert!(
        asked_in.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "the completion reached the worker outside the caller's trace: {asked_in:?}"
    );
}

/// A caller's W3C trace context.
const CALLER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
