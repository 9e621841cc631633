//! The gateway: sources' tools, resources and prompts re-exposed through our server, with
//! namespacing, URI rewriting, list_changed, upstream requests relayed to the caller, and
//! failure modes. Upstreams are real processes (`toolyard serve --stdio`).

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use toolyard::client::{elicit_handler, ClientBuilder, ProtocolChoice};
use toolyard::proto::{
    ContentBlock, ElicitAction, ElicitResult, Implementation, ProtocolVersion, ResourceContents,
    SubscriptionFilter,
};
use toolyard::MemoryTransport;
use toolyard::{Server, ServerBuilder};
use toolyard_gateway::{
    FailureMode, Launch, Lifecycle, Naming, ProcessSpec, SourceSpec, Supervision,
};
use toolyard_gateway::{Gateway, ListingGuard};

fn process_source(name: &str, command: &str, args: &[&str]) -> SourceSpec {
    SourceSpec {
        name: name.into(),
        version: None,
        description: None,
        launch: Launch::Process(ProcessSpec {
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            inherit_env: Vec::new(),
            inherit_env_defaults: true,
            cwd: None,
        }),
        lifecycle: Lifecycle::Singleton,
        call_timeout: Duration::from_secs(20),
        startup_timeout: Duration::from_secs(20),
        protocol: ProtocolChoice::Auto,
        supervision: Supervision {
            max_crashes: 2,
            backoff_initial: Duration::from_millis(50),
            ..Supervision::default()
        },
        failure_mode: FailureMode::Skip,
        naming: Naming::for_source(name),
        audience: None,
    }
}

fn toolyard_source(name: &str) -> SourceSpec {
    process_source(name, env!("CARGO_BIN_EXE_toolyard"), &["serve", "--stdio"])
}

async fn gateway_server() -> (Server, Gateway) {
    let guard = ListingGuard::default();
    let server = ServerBuilder::new("gateway", "1.0")
        .layer(Arc::new(guard.clone()))
        .start()
        .await
        .unwrap();
    let gateway = Gateway::new(&server, guard);
    (server, gateway)
}

fn text(blocks: &[ContentBlock]) -> String {
    match &blocks[0] {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// A sampling answer whose text is `text`.
fn model_answer(text: String) -> toolyard::proto::CreateMessageResult {
    toolyard::proto::CreateMessageResult {
        role: toolyard::proto::Role::Assistant,
        content: toolyard::proto::SamplingMessageContent::Single(
            toolyard::proto::SamplingMessageContentBlock::Text(toolyard::proto::TextContent::new(
                text,
            )),
        ),
        model: "m".into(),
        stop_reason: None,
        meta: None,
        result_type: None,
    }
}

/// Waits until `client` lists a tool named `name`.
async fn wait_for_tool(client: &toolyard::client::Client, name: &'static str) {
    wait_for(|| {
        let c = client.clone();
        async move {
            c.list_all_tools()
                .await
                .unwrap()
                .iter()
                .any(|t| t.name == name)
        }
    })
    .await;
}

async fn wait_for<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) {
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("condition not met within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sources_tools_resources_and_prompts_are_namespaced_and_forwarded() {
    let (server, gateway) = gateway_server().await;
    gateway.add_source(toolyard_source("demo")).await.unwrap();
    for protocol in [
        ProtocolChoice::Auto,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        let client = ClientBuilder::new(Implementation::new("t", "1"))
            .protocol(protocol)
            .connect(MemoryTransport::new(&server))
            .await
            .unwrap();
        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "demo__echo"), "{tools:?}");
        assert!(tools.iter().all(|t| t.name.starts_with("demo__")));
        let echoed = client
            .call_tool("demo__echo", json!({"message": "through"}))
            .await
            .unwrap();
        assert_eq!(text(&echoed.content), "through");
        let meta = echoed.meta.unwrap();
        assert_eq!(meta["io.toolyard/source"]["name"], "demo");
        // A tool's own failure passes through as a result, not an error.
        let failed = client.call_tool("demo__fail", json!({})).await.unwrap();
        assert!(failed.failed());
        let resources = client.list_all_resources().await.unwrap();
        assert!(
            resources.iter().any(|r| r.uri == "demo+demo://readme"),
            "{resources:?}"
        );
        let read = client.read_resource("demo+demo://readme").await.unwrap();
        match &read.contents[0] {
            ResourceContents::Text(t) => {
                assert_eq!(t.uri, "demo+demo://readme");
                assert!(t.text.contains("Toolyard demo"));
            }
            other => panic!("{other:?}"),
        }
        let templates = client.list_all_resource_templates().await.unwrap();
        assert!(templates
            .iter()
            .any(|t| t.uri_template == "demo+demo://users/{id}"));
        let user = client.read_resource("demo+demo://users/7").await.unwrap();
        assert_eq!(user.contents.len(), 1);
        let prompt = client
            .get_prompt("demo__greet", json!({"name": "Ada"}))
            .await
            .unwrap();
        assert!(!prompt.messages.is_empty());
        client.close().await;
    }
    gateway.shutdown().await;
}

/// Both generations, as a client's choice: the modern one (negotiated), and 2025-11-25.
const GENERATIONS: [ProtocolChoice; 2] = [
    ProtocolChoice::Auto,
    ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
];

/// A gateway whose one source `demo` is our demo server over stdio, spoken to in `upstream`.
async fn gateway_over_demo(upstream: ProtocolChoice) -> (Server, Gateway) {
    let (server, gateway) = gateway_server().await;
    let mut spec = toolyard_source("demo");
    spec.protocol = upstream;
    gateway.add_source(spec).await.unwrap();
    (server, gateway)
}

/// An upstream's elicitation (a server-to-client request from a legacy upstream, an
/// input round from a modern one) reaches the gateway's caller: as a server-to-client
/// request for a legacy caller, as an `InputRequiredResult` for a modern one (the upstream
/// call parked until the retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_elicitation_reaches_the_caller_in_every_generation_pairing() {
    for upstream in GENERATIONS {
        let (server, gateway) = gateway_over_demo(upstream).await;
        for downstream in GENERATIONS {
            let client = ClientBuilder::new(Implementation::new("t", "1"))
                .protocol(downstream)
                .on_elicit(elicit_handler(|_p| async {
                    let mut answer = ElicitResult::new(ElicitAction::Accept);
                    answer.content = Some(json!({"name": "Grace"}).as_object().unwrap().clone());
                    Ok(answer)
                }))
                .on_sample(toolyard::client::sample_handler(|_p| async {
                    Ok(model_answer("brief".into()))
                }))
                .connect(MemoryTransport::new(&server))
                .await
                .unwrap();
            let hello = client.call_tool("demo__ask_name", json!({})).await.unwrap();
            assert_eq!(
                text(&hello.content),
                "Hello, Grace!",
                "upstream {upstream:?}, downstream {downstream:?}"
            );
            let summary = client
                .call_tool("demo__summarize", json!({"text": "long"}))
                .await
                .unwrap();
            assert_eq!(
                text(&summary.content),
                "Summary: brief",
                "upstream {upstream:?}, downstream {downstream:?}"
            );
            client.close().await;
        }
        gateway.shutdown().await;
    }
}

/// A caller that declared none of elicitation, sampling and roots cannot be asked anything:
/// an upstream's question during its call is refused at once, naming the capability the
/// caller lacks, in every generation pairing (the gateway answers it in place instead of
/// relaying it through the call's loop), and the call ends with that refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_question_to_a_caller_without_the_capability_is_refused_at_once_in_every_pairing(
) {
    for upstream in GENERATIONS {
        let (server, gateway) = gateway_over_demo(upstream).await;
        for downstream in GENERATIONS {
            let client = ClientBuilder::new(Implementation::new("t", "1"))
                .protocol(downstream)
                .connect(MemoryTransport::new(&server))
                .await
                .unwrap();
            for (tool, args, capability) in [
                ("demo__ask_name", json!({}), "elicitation"),
                ("demo__summarize", json!({"text": "long"}), "sampling"),
                ("demo__list_roots", json!({}), "roots"),
            ] {
                let outcome =
                    tokio::time::timeout(Duration::from_secs(10), client.call_tool(tool, args))
                        .await
                        .expect("the call ends");
                let message = match outcome {
                    Ok(result) => {
                        assert!(result.failed(), "{tool}: {result:?}");
                        text(&result.content)
                    }
                    Err(e) => e.to_string(),
                };
                assert!(
                    message.contains(capability),
                    "upstream {upstream:?}, downstream {downstream:?}, {tool}: {message}"
                );
            }
            client.close().await;
        }
        gateway.shutdown().await;
    }
}

async fn next_tools_changed(sub: &mut toolyard::client::Subscription) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while sub.next().await.unwrap().method != "notifications/tools/list_changed" {}
    })
    .await
    .expect("a tools list_changed notification");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_and_removing_sources_fires_list_changed() {
    let (server, gateway) = gateway_server().await;
    let client = ClientBuilder::new(Implementation::new("t", "1"))
        .cache(false)
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let mut sub = client
        .subscribe(SubscriptionFilter {
            tools_list_changed: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    gateway.add_source(toolyard_source("one")).await.unwrap();
    next_tools_changed(&mut sub).await;
    assert!(client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .any(|t| t.name == "one__echo"));
    gateway.remove_source("one").await.unwrap();
    next_tools_changed(&mut sub).await;
    wait_for(|| {
        let c = client.clone();
        async move { c.list_all_tools().await.unwrap().is_empty() }
    })
    .await;
    let gone = client.call_tool("one__echo", json!({"message": "x"})).await;
    assert!(gone.is_err() || gone.unwrap().failed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_reports_success_tool_errors_and_failures_as_results() {
    let (_server, gateway) = gateway_server().await;
    gateway.add_source(toolyard_source("demo")).await.unwrap();
    let ok = gateway
        .execute("demo", "echo", json!({"message": "hi"}))
        .await;
    assert!(ok.success && !ok.is_error && ok.error.is_none(), "{ok:?}");
    assert_eq!(text(&ok.content), "hi");
    assert_eq!((ok.source.as_str(), ok.tool.as_str()), ("demo", "echo"));
    let failed = gateway.execute("demo", "fail", json!({})).await;
    assert!(
        !failed.success && failed.is_error && failed.error.is_some(),
        "{failed:?}"
    );
    let unknown = gateway.execute("nope", "echo", json!({})).await;
    assert!(!unknown.success && unknown.error.unwrap().contains("nope"));
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_skip_source_is_left_out_and_a_broken_fail_source_is_refused() {
    let (server, gateway) = gateway_server().await;
    gateway.add_source(toolyard_source("good")).await.unwrap();
    gateway
        .add_source(process_source("broken", "false", &[]))
        .await
        .expect("a skip source that cannot start is kept, not fatal");
    let client = ClientBuilder::new(Implementation::new("t", "1"))
        .connect(MemoryTransport::new(&server))
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "good__echo"));
    assert!(!tools.iter().any(|t| t.name.starts_with("broken__")));
    let mut fail = process_source("fatal", "false", &[]);
    fail.failure_mode = FailureMode::Fail;
    let e = gateway.add_source(fail).await.unwrap_err();
    assert!(e.to_string().contains("fatal"), "{e}");
    let status = gateway.status();
    let broken = status.iter().find(|s| s.name == "broken").unwrap();
    assert!(!broken.listed);
    gateway.shutdown().await;
}

/// `toolyard serve --config` as a gateway: the admin API (behind its own token) adds,
/// refreshes and removes sources, and SIGHUP applies an edited config file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_and_sighup_manage_sources_of_a_running_gateway() {
    use toolyard_testkit::ServerProcess as Process;
    let bin = env!("CARGO_BIN_EXE_toolyard");
    let dir = std::env::temp_dir().join(format!("toolyard-gw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    let source = |name: &str| {
        format!("[[sources]]\nname = \"{name}\"\ncommand = \"{bin}\"\nargs = [\"serve\", \"--stdio\"]\n")
    };
    std::fs::write(
        &config,
        format!("[gateway]\nadmin_token = \"adm1n\"\n\n{}", source("demo")),
    )
    .unwrap();
    let gateway = tokio::task::spawn_blocking({
        let config = config.clone();
        move || Process::start(bin, &["serve", "--config", config.to_str().unwrap()])
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let admin = format!("{}/admin/sources", gateway.base_url());
    let refused = http.get(&admin).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let wrong = http.get(&admin).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let list: serde_json::Value = serde_json::from_slice(
        &http
            .get(&admin)
            .bearer_auth("adm1n")
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(list["sources"][0]["name"], "demo");
    assert_eq!(list["sources"][0]["health"]["state"], "healthy");
    let added = http
        .post(&admin)
        .bearer_auth("adm1n")
        .body(json!({"name": "second", "command": bin, "args": ["serve", "--stdio"]}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201, "{}", added.text().await.unwrap());
    let duplicate = http
        .post(&admin)
        .bearer_auth("adm1n")
        .body(json!({"name": "second", "command": bin}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(duplicate.status(), 409);
    let client = ClientBuilder::new(Implementation::new("t", "1"))
        .cache(false)
        .connect(toolyard::client::StreamableHttpTransport::new(
            gateway.url(),
        ))
        .await
        .unwrap();
    let names =
        |tools: Vec<toolyard::proto::Tool>| tools.into_iter().map(|t| t.name).collect::<Vec<_>>();
    let tools = names(client.list_all_tools().await.unwrap());
    assert!(
        tools.contains(&"demo__echo".to_owned()) && tools.contains(&"second__echo".to_owned()),
        "{tools:?}"
    );
    let refreshed = http
        .post(format!("{admin}/second/refresh"))
        .bearer_auth("adm1n")
        .send()
        .await
        .unwrap();
    assert_eq!(refreshed.status(), 200);
    let removed = http
        .delete(format!("{admin}/second"))
        .bearer_auth("adm1n")
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 200);
    let unknown = http
        .delete(format!("{admin}/second"))
        .bearer_auth("adm1n")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    wait_for(|| {
        let c = client.clone();
        async move {
            !c.list_all_tools()
                .await
                .unwrap()
                .iter()
                .any(|t| t.name.starts_with("second__"))
        }
    })
    .await;
    // SIGHUP: the edited file adds `third` and keeps `demo`.
    std::fs::write(
        &config,
        format!(
            "[gateway]\nadmin_token = \"adm1n\"\n\n{}\n{}",
            source("demo"),
            source("third")
        ),
    )
    .unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &gateway.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for_tool(&client, "third__echo").await;
    let echoed = client
        .call_tool("third__echo", json!({"message": "reloaded"}))
        .await
        .unwrap();
    assert_eq!(text(&echoed.content), "reloaded");
    client.close().await;
    drop(gateway);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A legacy client whose sampling answers carry `name`.
async fn sampling_client(server: &Server, name: &'static str) -> toolyard::client::Client {
    ClientBuilder::new(Implementation::new(name, "1"))
        .protocol(ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25))
        .on_sample(toolyard::client::sample_handler(move |_p| async move {
            Ok(model_answer(format!("from {name}")))
        }))
        .connect(MemoryTransport::new(server))
        .await
        .unwrap()
}

/// Caller `a` starts a call whose upstream asks for sampling after 600 ms; caller `b` starts
/// a slow call on the same source meanwhile. Returns what `a`'s call gave.
async fn question_while_another_call_runs(
    a: &toolyard::client::Client,
    b: &toolyard::client::Client,
) -> Result<toolyard::proto::CallToolResult, toolyard::client::ClientError> {
    let asking = a.call_tool("demo__summarize", json!({"text": "long", "delay_ms": 600}));
    let other = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        b.call_tool("demo__slow", json!({"steps": 1, "delay_ms": 1500}))
            .await
    };
    let (asked, other) = tokio::join!(asking, other);
    assert!(!other.unwrap().failed());
    asked
}

/// Regression: an upstream's question went to the newest call in flight on the whole source,
/// whichever connection it came from and whoever made that call, so one caller could be
/// shown (and answer) another caller's sampling request. Now it goes to the call on the
/// connection that asked; on a shared connection it goes to a call only when every call
/// there is one caller's, and otherwise is refused with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_question_reaches_only_the_caller_whose_call_asked() {
    let (server, gateway) = gateway_server().await;
    // A legacy upstream over stdio: its questions carry no link to a call.
    let mut pooled = toolyard_source("demo");
    pooled.protocol = ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25);
    pooled.lifecycle = Lifecycle::Pooled {
        size: 2,
        min_idle: 0,
        max_concurrency: 1,
        idle: Duration::from_secs(60),
    };
    gateway.add_source(pooled.clone()).await.unwrap();
    let alice = sampling_client(&server, "alice").await;
    let bob = sampling_client(&server, "bob").await;
    let asked = question_while_another_call_runs(&alice, &bob)
        .await
        .unwrap();
    assert_eq!(text(&asked.content), "Summary: from alice", "pooled");
    gateway.remove_source("demo").await.unwrap();

    // A singleton shares one connection: with two callers' calls on it, nobody is guessed.
    let mut singleton = pooled;
    singleton.lifecycle = Lifecycle::Singleton;
    gateway.add_source(singleton).await.unwrap();
    wait_for_tool(&alice, "demo__summarize").await;
    let refused = question_while_another_call_runs(&alice, &bob).await;
    let message = match refused {
        Ok(result) => {
            assert!(result.failed(), "{result:?}");
            text(&result.content)
        }
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains("cannot tell which of its callers"),
        "{message}"
    );
    // Both calls of one caller: its own question reaches it whichever call takes it.
    let asked = question_while_another_call_runs(&alice, &alice)
        .await
        .unwrap();
    assert_eq!(
        text(&asked.content),
        "Summary: from alice",
        "singleton, one caller"
    );
    gateway.shutdown().await;
}

/// Over Streamable HTTP a legacy upstream's question travels on the response stream of the
/// request it belongs to, so even on one shared connection with two callers' calls in
/// flight it reaches the right caller (over stdio the same situation is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_an_upstream_question_follows_its_request_stream_to_the_right_caller() {
    let upstream = tokio::task::spawn_blocking(|| {
        toolyard_testkit::ServerProcess::start(env!("CARGO_BIN_EXE_toolyard"), &["serve"])
    })
    .await
    .unwrap();
    let (server, gateway) = gateway_server().await;
    let mut remote = toolyard_source("demo");
    remote.launch = Launch::Remote(toolyard_gateway::RemoteSpec {
        url: upstream.url(),
        transport: toolyard_gateway::RemoteTransport::StreamableHttp,
        headers: Vec::new(),
    });
    remote.protocol = ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25);
    gateway.add_source(remote).await.unwrap();
    let alice = sampling_client(&server, "alice").await;
    let bob = sampling_client(&server, "bob").await;
    let asked = question_while_another_call_runs(&alice, &bob)
        .await
        .unwrap();
    assert_eq!(text(&asked.content), "Summary: from alice");
    let asked = question_while_another_call_runs(&bob, &alice)
        .await
        .unwrap();
    assert_eq!(text(&asked.content), "Summary: from bob");
    gateway.shutdown().await;
}

/// The README's gateway example enables the admin API from `${TOOLYARD_ADMIN_TOKEN}`: on a
/// machine where that variable is not set the gateway must still start (regression: it
/// stopped with "source `[gateway]`: admin_token uses ${...}, which is not set"), serve its
/// sources, and leave the admin API off, saying so on stderr.
#[test]
fn an_unset_admin_token_variable_leaves_the_admin_api_off_and_the_gateway_starts() {
    let bin = env!("CARGO_BIN_EXE_toolyard");
    let dir = std::env::temp_dir().join(format!("toolyard-gw-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    let var = "TOOLYARD_TEST_ADMIN_TOKEN_NEVER_SET";
    std::fs::write(
        &config,
        format!(
            "[gateway]\nadmin_token = \"${{{var}}}\"\n\n[[sources]]\nname = \"demo\"\ncommand = \"{bin}\"\nargs = [\"serve\", \"--stdio\"]\n"
        ),
    )
    .unwrap();
    let port = toolyard_testkit::free_port();
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--http", &format!("127.0.0.1:{port}")])
        .env_remove(var)
        .env_remove("TOOLYARD_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let get = |path: &str| -> Option<u16> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut head = String::new();
        s.read_to_string(&mut head).ok()?;
        head.split_whitespace().nth(1)?.parse().ok()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while get("/healthz") != Some(200) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the gateway exited with {status}:\n{err}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no /healthz within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        get("/admin/sources"),
        Some(404),
        "the admin API must be off"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        err.contains(var) && err.contains("admin API is off"),
        "no warning on stderr:\n{err}"
    );
    assert!(!err.contains("source `[gateway]`"), "{err}");
}

/// `toolyard serve --stdio --config CONFIG` with `envs` added to its environment, spoken to
/// line by line (a legacy `initialize` first); killed and reaped when dropped.
struct StdioGateway {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: i64,
}

impl Drop for StdioGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StdioGateway {
    fn start(config: &std::path::Path, envs: &[(&str, &str)]) -> StdioGateway {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolyard"));
        cmd.args(["serve", "--stdio", "--config", config.to_str().unwrap()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TOOLYARD_") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(envs.iter().copied());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut gateway = StdioGateway {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        let init = gateway.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        gateway.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        gateway
    }

    fn send(&mut self, message: &serde_json::Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and waits (60 s at most) for its answer.
    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer to {method} ({e})"));
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    }

    /// The names `tools/list` shows.
    fn tool_names(&mut self) -> Vec<String> {
        let listed = self.request("tools/list", json!({}));
        listed["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The text of a tool call's first content block.
    fn call_text(&mut self, tool: &str, args: serde_json::Value) -> String {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert_ne!(r["result"]["isError"], true, "{r}");
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_owned()
    }
}

/// A scratch config file, removed (with its directory) when dropped.
struct ScratchConfig(std::path::PathBuf);

impl ScratchConfig {
    fn new(tag: &str, body: &str) -> ScratchConfig {
        let dir = std::env::temp_dir().join(format!("toolyard-gw-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gateway.toml"), body).unwrap();
        ScratchConfig(dir)
    }

    fn path(&self) -> std::path::PathBuf {
        self.0.join("gateway.toml")
    }
}

impl Drop for ScratchConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `url` source without `transport` that points at an HTTP+SSE endpoint (`/sse` of
/// `toolyard serve --http`): the gateway's client falls back from Streamable HTTP by itself.
#[test]
fn a_url_source_without_transport_reaches_an_http_sse_endpoint() {
    let upstream =
        toolyard_testkit::ServerProcess::start(env!("CARGO_BIN_EXE_toolyard"), &["serve"]);
    let config = ScratchConfig::new(
        "sse-url",
        &format!(
            "[[sources]]\nname = \"legacy\"\nurl = \"{}/sse\"\nstartup_timeout_ms = 20000\n",
            upstream.base_url()
        ),
    );
    let mut gateway = StdioGateway::start(&config.path(), &[]);
    let names = gateway.tool_names();
    assert!(names.contains(&"legacy__echo".to_owned()), "{names:?}");
    let text = gateway.call_text("legacy__echo", json!({"message": "through /sse"}));
    assert_eq!(text, "through /sse");
}

/// A `[[sources]]` entry running `tests/fixtures/fault_server.py` as a correct server (its
/// `echo` mode), with `extra` lines.
fn fault_server_source(name: &str, extra: &str) -> String {
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fault_server.py"
    );
    format!(
        "[[sources]]\nname = \"{name}\"\ncommand = {python:?}\nargs = [\"-S\", {script:?}, \"echo\"]\n{extra}\n"
    )
}

/// A source's `resources/read` result reaches the caller whole, its URIs renamed: its
/// `_meta` (it used to be dropped: the gateway kept only the contents); its caching hints
/// are for 2026-07-28 callers only, and this caller is legacy.
#[test]
fn a_sources_read_result_keeps_its_meta_through_the_gateway() {
    let config = ScratchConfig::new("read-meta", &fault_server_source("notes", ""));
    let mut gateway = StdioGateway::start(&config.path(), &[]);
    let listed = gateway.request("resources/list", json!({}));
    let uri = listed["result"]["resources"][0]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("{listed}"))
        .to_owned();
    assert_eq!(uri, "notes+fault://note", "{listed}");
    let read = gateway.request("resources/read", json!({"uri": uri}));
    let result = &read["result"];
    assert_eq!(result["_meta"], json!({"etag": "v7"}), "{read}");
    assert_eq!(result["contents"][0]["uri"], "notes+fault://note", "{read}");
    assert_eq!(result["contents"][0]["text"], "a note", "{read}");
    assert!(result.get("ttlMs").is_none(), "legacy caller: {read}");
    assert!(result.get("cacheScope").is_none(), "legacy caller: {read}");
}

/// A source's process sees `PATH`, `HOME`, the proxy and trust-store variables of the
/// gateway's environment and what its `inherit_env` names, nothing else of ours;
/// `inherit_env_defaults = false` drops the proxy and trust-store ones.
#[test]
fn a_sources_process_sees_proxy_and_trust_store_variables_and_its_inherit_env() {
    let source = fault_server_source;
    let config = ScratchConfig::new(
        "inherit-env",
        &[
            source("plain", ""),
            source("extra", "inherit_env = [\"IT_WANTED\"]"),
            source(
                "bare",
                "inherit_env = [\"IT_WANTED\"]\ninherit_env_defaults = false",
            ),
        ]
        .join("\n"),
    );
    let ours = [
        ("HTTPS_PROXY", "http://proxy.invalid:3128"),
        ("http_proxy", "http://proxy.invalid:3128"),
        ("NO_PROXY", "localhost"),
        ("SSL_CERT_FILE", "/etc/ssl/private-ca.pem"),
        ("REQUESTS_CA_BUNDLE", "/etc/ssl/private-ca.pem"),
        ("IT_UNRELATED_SECRET", "hunter2"),
        ("IT_WANTED", "yes"),
    ];
    let mut gateway = StdioGateway::start(&config.path(), &ours);
    let mut env_of = |source: &str| -> serde_json::Value {
        serde_json::from_str(&gateway.call_text(&format!("{source}__env"), json!({}))).unwrap()
    };
    let plain = env_of("plain");
    for (k, v) in &ours[..5] {
        assert_eq!(plain[k], *v, "{k} not passed through: {plain}");
    }
    assert!(plain.get("PATH").is_some(), "{plain}");
    for k in ["IT_UNRELATED_SECRET", "IT_WANTED"] {
        assert!(plain.get(k).is_none(), "{k} leaked: {plain}");
    }
    let extra = env_of("extra");
    assert_eq!(extra["IT_WANTED"], "yes", "{extra}");
    assert_eq!(extra["HTTPS_PROXY"], "http://proxy.invalid:3128", "{extra}");
    assert!(extra.get("IT_UNRELATED_SECRET").is_none(), "{extra}");
    let bare = env_of("bare");
    assert_eq!(bare["IT_WANTED"], "yes", "{bare}");
    for (k, _) in &ours[..5] {
        assert!(
            bare.get(k).is_none(),
            "{k} passed without the defaults: {bare}"
        );
    }
    assert!(bare.get("PATH").is_some(), "{bare}");
}
