//! The NATS bridge against a real `nats-server` (2.11+, installed by
//! `scripts/install-test-deps`) that each test starts on free loopback ports, and kills or
//! restarts to inject faults. Workers and gateways run in process: a worker is a Toolyard
//! server with `Worker`, a gateway a second server with `RemoteTools`, and the caller the
//! typed client over the in-memory transport.

mod bridge;
mod faults;
mod principals;
mod resources;
mod scopes;
mod tasks;

use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolyard::client::{Client, ClientBuilder, ProtocolChoice};
use toolyard::proto::{CallToolResult, ContentBlock, Implementation};
use toolyard::{tool_fn, HandlerError, ListSettings, MemoryTransport, Server, ServerBuilder};
use toolyard_nats::{RemoteConfig, RemoteTools, Worker, WorkerConfig};

/// A bound on waiting for something that should happen quickly.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

#[derive(Deserialize, JsonSchema)]
struct Echo {
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct Sleep {
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct Count {
    n: usize,
}

/// What the worker's tools saw.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) started: AtomicUsize,
    pub(crate) cancelled: AtomicUsize,
    pub(crate) finished: AtomicUsize,
}

struct Unfinished(Option<Arc<Seen>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(seen) = &self.0 {
            seen.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A worker's server: `echo`, `boom` (panics at once), `progress` (three progress steps, then "done"), `sleep`
/// (sleeps `ms`, counting cancellations and completions in `seen`), `sleep_task` (the same,
/// with optional task support), `ask` (elicits two names), `ask_task` (the same, with
/// optional task support), `ask_then_task` (asks, then becomes a task and asks again:
/// [`ask_then_task`]), `flood` (`n` progress notifications at once, then
/// "flooded"), `big` (answers `n` bytes of text); the resource `worker://readme` ("read
/// me"), the template `worker://items/{id}` ("item {id}", and a failure for the id
/// `broken`) and the prompt `greet` (argument `name`).
pub(crate) async fn worker_server(seen: Arc<Seen>) -> Server {
    worker_server_reading(seen, "read me").await
}

/// [`worker_server`] whose `worker://readme` reads `readme`.
pub(crate) async fn worker_server_reading(seen: Arc<Seen>, readme: &str) -> Server {
    use toolyard::proto::{
        CacheScope, GetPromptResult, Prompt, PromptArgument, PromptMessage, ReadResourceResult,
        Resource, ResourceContents, ResourceTemplate, Role,
    };
    use toolyard::{PromptDef, ResourceDef, TemplateDef};
    let on_sleep = seen.clone();
    let readme = readme.to_owned();
    let resource = ResourceDef::new(
        Resource::new("worker://readme", "readme"),
        Arc::new(move |_ctx, req| {
            let text = readme.clone();
            // With its own `_meta` and caching hints, which the gateway must pass on. A
            // TTL of 1 ms: a client caches a read for its TTL, and tests read it again to
            // see which worker answers.
            Box::pin(async move {
                Ok(ReadResourceResult {
                    meta: serde_json::json!({"source": "the worker"})
                        .as_object()
                        .cloned(),
                    ttl_ms: Some(1),
                    cache_scope: Some(CacheScope::Public),
                    ..vec![ResourceContents::text(req.uri, None, text)].into()
                })
            })
        }),
    );
    let items = TemplateDef::new(
        ResourceTemplate {
            uri_template: "worker://items/{id}".into(),
            name: "item".into(),
            ..Default::default()
        },
        Arc::new(|_ctx, req| {
            Box::pin(async move {
                let id = req.vars.get("id").cloned().unwrap_or_default();
                if id == "broken" {
                    return Err(HandlerError::failed("the item store is down"));
                }
                Ok(vec![ResourceContents::text(req.uri, None, format!("item {id}"))].into())
            })
        }),
    )
    .unwrap();
    let greet = PromptDef::new(
        Prompt {
            name: "greet".into(),
            arguments: Some(vec![PromptArgument {
                name: "name".into(),
                title: None,
                description: None,
                required: Some(true),
            }]),
            ..Default::default()
        },
        Arc::new(|_ctx, args| {
            Box::pin(async move {
                let name = args.get("name").cloned().unwrap_or_default();
                Ok(GetPromptResult {
                    description: Some("A greeting".into()),
                    messages: vec![PromptMessage::text(Role::User, format!("Hello, {name}!"))],
                    meta: None,
                    result_type: None,
                })
            })
        }),
    );
    ServerBuilder::new("worker", "1.0")
        // Every test worker seals `requestState` with the same secret, as a deployment's
        // workers of one name must: an input round's retry may land on any of them.
        .state_secret("toolyard-nats-test-secret", Duration::from_secs(600))
        .resource(resource)
        .template(items)
        .prompt(greet)
        .tool(
            tool_fn(
                "echo",
                "Echoes",
                |_ctx, a: Echo| async move { Ok(a.message) },
            )
            .unwrap(),
        )
        .tool(
            tool_fn(
                "boom",
                "Panics before it awaits anything",
                |_ctx, _a: serde_json::Value| async move {
                    if std::hint::black_box(true) {
                        panic!("boom");
                    }
                    Ok("unreachable".to_owned())
                },
            )
            .unwrap(),
        )
        .tool(
            tool_fn(
                "trace",
                "Returns the traceparent it runs under, and the baggage after it if any",
                |ctx, _a: serde_json::Value| async move {
                    let traceparent = ctx.traceparent().unwrap_or("none");
                    Ok(match ctx.baggage() {
                        Some(baggage) => format!("{traceparent} {baggage}"),
                        None => traceparent.to_owned(),
                    })
                },
            )
            .unwrap(),
        )
        .tool({
            // `sleep` again, annotated read-only: the gateway may re-issue it once.
            let seen = seen.clone();
            toolyard::ToolDef::from_fn(
                toolyard::proto::Tool {
                    name: "sleep_ro".into(),
                    description: Some("Sleeps; read-only".into()),
                    input_schema: toolyard::schema_for::<Sleep>(),
                    annotations: Some(toolyard::proto::ToolAnnotations {
                        read_only_hint: Some(true),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                move |_ctx, a: Sleep| {
                    let seen = seen.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(a.ms)).await;
                        seen.finished.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, HandlerError>("slept".to_owned())
                    }
                },
            )
            .unwrap()
        })
        .tool(asker("ask"))
        // `ask` that runs as a task for a caller of the tasks extension.
        .tool(asker("ask_task").with_task_support(toolyard::proto::TaskSupport::Optional))
        .tool(ask_then_task())
        .tool(
            tool_fn(
                "progress",
                "Reports progress",
                |ctx, _a: serde_json::Value| async move {
                    for i in 1..=3 {
                        ctx.progress(f64::from(i), Some(3.0), Some("step"));
                    }
                    Ok("done".to_owned())
                },
            )
            .unwrap(),
        )
        .tool(sleeper("sleep", "Sleeps", on_sleep))
        // `sleep` that runs as a task for a caller of the tasks extension.
        .tool(
            sleeper("sleep_task", "Sleeps, as a task", seen.clone())
                .with_task_support(toolyard::proto::TaskSupport::Optional),
        )
        .tool(
            tool_fn("flood", "Floods progress", |ctx, a: Count| async move {
                for i in 0..a.n {
                    ctx.progress(i as f64, None, None);
                }
                Ok("flooded".to_owned())
            })
            .unwrap(),
        )
        .tool(
            tool_fn("big", "Answers n bytes", |_ctx, a: Count| async move {
                Ok("x".repeat(a.n))
            })
            .unwrap(),
        )
        .start()
        .await
        .unwrap()
}

/// A tool that asks the caller's user for a name (elicitation), twice under one key, and
/// answers both names.
/// An elicitation form asking `question` for a `name`.
pub(crate) fn form(question: &str) -> toolyard::proto::ElicitRequestParams {
    let mut schema = toolyard::proto::JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert(
        "properties".into(),
        serde_json::json!({"name": {"type": "string"}}),
    );
    toolyard::proto::ElicitRequestParams::form(question, schema)
}

/// The `name` a [`form`] was answered with ("?" without one).
pub(crate) fn answered_name(r: &toolyard::proto::ElicitResult) -> String {
    r.content
        .as_ref()
        .and_then(|c| c.get("name"))
        .and_then(|v| v.as_str())
        .unwrap_or("?")
        .to_owned()
}

fn asker(name: &str) -> toolyard::ToolDef {
    tool_fn(
        name,
        "Asks the caller's user for a name (elicitation), twice under one key",
        |ctx, _a: serde_json::Value| async move {
            let first = ctx.elicit("name", form("First name?")).await?;
            let second = ctx.elicit("again", form("Last name?")).await?;
            Ok::<_, HandlerError>(format!(
                "{} {}",
                answered_name(&first),
                answered_name(&second)
            ))
        },
    )
    .unwrap()
}

/// `ask_then_task`: runs only as a task, and starts it itself (`with_deferred_task`): it asks
/// for a first name as an ordinary request, starts its task, then asks for a last name
/// through the task. With `{"quick": true}` it answers "quick" before starting it.
fn ask_then_task() -> toolyard::ToolDef {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Quick {
        #[serde(default)]
        quick: bool,
    }
    tool_fn(
        "ask_then_task",
        "Asks for a first name, then becomes a task and asks for a last name",
        |ctx: toolyard::RequestContext, a: Quick| async move {
            if a.quick {
                return Ok("quick".to_owned());
            }
            let first = ctx.elicit("name", form("First name?")).await?;
            ctx.start_task().await;
            let second = ctx.elicit("again", form("Last name?")).await?;
            Ok::<_, HandlerError>(format!(
                "{} {}",
                answered_name(&first),
                answered_name(&second)
            ))
        },
    )
    .unwrap()
    .with_task_support(toolyard::proto::TaskSupport::Required)
    .with_deferred_task()
}

/// A tool that sleeps `ms`, counting in `seen` the calls that finished and those dropped
/// before they did (a cancelled request's future is dropped, not run to its end).
fn sleeper(name: &str, description: &str, seen: Arc<Seen>) -> toolyard::ToolDef {
    tool_fn(name, description, move |_ctx, a: Sleep| {
        let seen = seen.clone();
        async move {
            seen.started.fetch_add(1, Ordering::SeqCst);
            let mut guard = Unfinished(Some(seen.clone()));
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            guard.0 = None;
            seen.finished.fetch_add(1, Ordering::SeqCst);
            Ok::<_, HandlerError>("slept".to_owned())
        }
    })
    .unwrap()
}

/// Waits until `counter` is above zero (within [`WAIT`]); `what` says what never happened.
pub(crate) async fn counted(counter: &AtomicUsize, what: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while counter.load(Ordering::SeqCst) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn connect(url: &str) -> async_nats::Client {
    toolyard_nats::connect(url, "test").await.unwrap()
}

/// Puts a catalog entry for a worker written by hand: `server`'s instance `instance`,
/// offering `tools` (each taking any object), as a worker of ours would.
pub(crate) async fn put_catalog_entry(
    bus: &async_nats::Client,
    server: &str,
    instance: &str,
    tools: &[&str],
) {
    let kv = async_nats::jetstream::new(bus.clone())
        .get_key_value(toolyard_nats::CATALOG_BUCKET)
        .await
        .unwrap();
    let tools = tools
        .iter()
        .map(|t| {
            serde_json::from_value(
                serde_json::json!({"name": t, "inputSchema": {"type": "object"}}),
            )
            .unwrap()
        })
        .collect();
    let entry = toolyard_nats::CatalogEntry::new(server, instance, tools);
    kv.put(entry.key(), serde_json::to_vec(&entry).unwrap().into())
        .await
        .unwrap();
}

/// The state of JetStream stream `name` now (asked of the server each time, not cached).
pub(crate) async fn stream_state(
    bus: &async_nats::Client,
    name: &str,
) -> async_nats::jetstream::stream::State {
    let mut stream = async_nats::jetstream::new(bus.clone())
        .get_stream(name)
        .await
        .unwrap();
    stream.info().await.unwrap().state.clone()
}

/// Waits (bounded) until object store `bucket`, which must be there (an object was put),
/// holds no object.
pub(crate) async fn all_deleted_from(raw: &async_nats::Client, bucket: &str) {
    use futures_util::StreamExt;
    let store = async_nats::jetstream::new(raw.clone())
        .get_object_store(bucket)
        .await
        .unwrap_or_else(|e| panic!("{bucket} was never created: {e}"));
    let deadline = tokio::time::Instant::now() + WAIT;
    while store.list().await.unwrap().next().await.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "an object of {bucket} was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A message's first value of header `name`, or "" without one.
pub(crate) fn header_value(
    message: &async_nats::Message,
    name: async_nats::header::HeaderName,
) -> String {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default()
}

/// A worker of [`worker_server`]'s tools on its own connection to `url`, as `config` says.
pub(crate) async fn configured_worker(url: &str, config: WorkerConfig) -> Worker {
    Worker::start(
        worker_server(Arc::default()).await,
        connect(url).await,
        config,
    )
    .await
    .unwrap()
}

pub(crate) async fn start_worker(url: &str, name: &str, seen: Arc<Seen>) -> Worker {
    let mut config = WorkerConfig::new(name);
    config.keepalive = Duration::from_millis(200);
    config.drain_timeout = Duration::from_millis(500);
    Worker::start(worker_server(seen).await, connect(url).await, config)
        .await
        .unwrap()
}

/// A worker in a tokio runtime of its own with `threads` threads (one: its subscription loop
/// starts requests in place; more: each request is a task at once), so what its tools do to
/// their threads cannot touch the test's runtime, where the gateway and the caller run.
pub(crate) struct WorkerElsewhere {
    worker: Option<Worker>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl WorkerElsewhere {
    pub(crate) fn start(url: &str, name: &str, seen: Arc<Seen>, threads: usize) -> WorkerElsewhere {
        let (url, name) = (url.to_owned(), name.to_owned());
        // A runtime cannot be started from within the test's: from a thread of its own.
        let (runtime, worker) = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .unwrap();
            let worker = runtime.block_on(start_worker(&url, &name, seen));
            (runtime, worker)
        })
        .join()
        .unwrap();
        WorkerElsewhere {
            worker: Some(worker),
            runtime: Some(runtime),
        }
    }
}

impl Drop for WorkerElsewhere {
    fn drop(&mut self) {
        drop(self.worker.take());
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A worker of `slots` slots and `waiting` room to wait (`None`: the default), counting
/// its calls in `seen`.
pub(crate) async fn start_worker_with_slots(
    url: &str,
    name: &str,
    seen: Arc<Seen>,
    slots: usize,
    waiting: Option<usize>,
) -> Worker {
    let mut config = WorkerConfig::new(name);
    config.concurrency = slots;
    config.waiting = waiting;
    Worker::start(worker_server(seen).await, connect(url).await, config)
        .await
        .unwrap()
}

/// A gateway server exposing the bus's tools, and a client of it.
pub(crate) struct Gateway {
    pub(crate) remote: RemoteTools,
    pub(crate) client: Client,
    /// The gateway's server, for more clients.
    pub(crate) server: Server,
}

pub(crate) async fn gateway(url: &str, config: RemoteConfig) -> Gateway {
    gateway_on(connect(url).await, config).await
}

/// A gateway on a bus connection the test made (e.g. with a small subscription capacity).
pub(crate) async fn gateway_on(bus: async_nats::Client, config: RemoteConfig) -> Gateway {
    gateway_watching_on(bus.clone(), bus, config).await
}

/// A gateway whose calls travel on `bus` and that follows the catalog on `watch`.
pub(crate) async fn gateway_watching_on(
    bus: async_nats::Client,
    watch: async_nats::Client,
    config: RemoteConfig,
) -> Gateway {
    // Listings uncached: the tests poll them while workers come and go (a real client
    // follows tools/list_changed instead).
    let server = ServerBuilder::new("gateway", "1.0")
        .list_settings(ListSettings {
            ttl_ms: 0,
            ..ListSettings::default()
        })
        .start()
        .await
        .unwrap();
    let remote = RemoteTools::start_with_watch(server.clone(), bus, watch, config)
        .await
        .unwrap();
    let client = ClientBuilder::new(Implementation::new("nats-test", "1.0"))
        .protocol(ProtocolChoice::Auto)
        .request_timeout(WAIT)
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    Gateway {
        remote,
        client,
        server,
    }
}

/// Short deadlines, so fault tests end quickly.
pub(crate) fn quick() -> RemoteConfig {
    inactive_after(Duration::from_secs(2))
}

/// A gateway's settings with calls failing after `silence` without a frame.
pub(crate) fn inactive_after(silence: Duration) -> RemoteConfig {
    RemoteConfig {
        inactivity: silence,
        ..RemoteConfig::default()
    }
}

/// The real `calc` worker's `echo` still answers through this gateway.
pub(crate) async fn still_serves(client: &Client) {
    let echo = client
        .call_tool(
            "calc__echo",
            serde_json::json!({"message": "still serving"}),
        )
        .await
        .unwrap();
    assert_eq!(text(&echo), "still serving");
}

pub(crate) fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

/// Waits until the gateway lists exactly the tools `want` says (by a predicate).
pub(crate) async fn listed(client: &Client, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        if want(&names) {
            return names;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listing never became what the test waits for: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` on a nats-server's monitoring port, as JSON.
pub(crate) async fn monitor(nats: &toolyard_testkit::NatsServer, path: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let base = nats.monitoring_url();
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}
