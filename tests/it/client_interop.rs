//! The MCP client against real MCP servers nobody here wrote, run as processes:
//! `@modelcontextprotocol/server-everything` (stdio, Streamable HTTP and HTTP+SSE),
//! `@modelcontextprotocol/server-filesystem` (stdio, directories from our roots),
//! `mcp-server-git` and `mcp-server-time` (Python, stdio), and Toolyard's own binary.
//! `scripts/install-test-deps` installs them into `$TOOLYARD_CACHE` (pins in
//! `tests/interop/`); without them these tests fail and say so. Every wait has a generous
//! deadline; nothing asserts how fast something happened.

use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolyard::client::StdioTransport;
use toolyard::client::{
    elicit_handler, fixed_roots, sample_handler, Client, ClientBuilder, ClientError, Notice,
    ProtocolChoice, RequestOptions, RootsHandler,
};
use toolyard::proto::{
    CallToolResult, CompleteArgument, CompleteContext, CompleteReference, CompleteRequestParams,
    ContentBlock, CreateMessageRequestParams, CreateMessageResult, ElicitAction,
    ElicitRequestParams, ElicitResult, Implementation, LoggingLevel, PromptReference,
    ProtocolVersion, ResourceContents, ResourceTemplateReference, Role, Root,
    SamplingMessageContent, SamplingMessageContentBlock, SubscriptionFilter, TextContent,
};
use toolyard_testkit::cache;

/// How long any one wait may take before the test gives up (never an assertion on speed).
const WAIT: Duration = Duration::from_secs(60);

// --- where scripts/install-test-deps put the servers ---------------------------------------

/// A file of the cache, or a failure that says how to install it.
pub(crate) fn installed(relative: &str) -> PathBuf {
    let path = cache().join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-test-deps (it installs the interop servers into \
         $TOOLYARD_CACHE, default ~/.cache/toolyard)",
        path.display()
    );
    path
}

fn everything_js() -> PathBuf {
    installed("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn filesystem_js() -> PathBuf {
    installed("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
}

/// The venv's Python, after checking `module` is installed in it.
fn venv_python(module: &str) -> PathBuf {
    let python = installed("venv/bin/python");
    let lib = installed("venv/lib");
    let found = std::fs::read_dir(&lib)
        .expect("read the venv's lib folder")
        .filter_map(Result::ok)
        .any(|e| e.path().join("site-packages").join(module).exists());
    assert!(
        found,
        "the Python package {module} is not in {}: run scripts/install-test-deps",
        lib.display()
    );
    python
}

// --- a client whose handlers record what servers asked -----------------------------------

const MODEL: &str = "toolyard-test-model";
const SAMPLED: &str = "sampled by toolyard";
const ELICITED_NAME: &str = "Ada Lovelace";

/// What the servers asked our handlers, and what they told us.
#[derive(Default)]
struct Seen {
    elicit: Mutex<Vec<ElicitRequestParams>>,
    sample: Mutex<Vec<CreateMessageRequestParams>>,
    roots: AtomicUsize,
    logs: AtomicUsize,
}

impl Seen {
    fn elicited(&self) -> Vec<ElicitRequestParams> {
        self.elicit.lock().unwrap().clone()
    }

    fn sampled(&self) -> Vec<CreateMessageRequestParams> {
        self.sample.lock().unwrap().clone()
    }
}

/// A roots handler that lists `roots` and counts its calls.
fn counted_roots(seen: &Arc<Seen>, roots: Vec<Root>) -> RootsHandler {
    let inner = fixed_roots(roots);
    let seen = seen.clone();
    Arc::new(move || {
        seen.roots.fetch_add(1, Ordering::SeqCst);
        inner()
    })
}

/// A client that answers elicitation (form: a filled-in form; URL: "done"), sampling (a fixed
/// message from a fixed model) and roots (`roots`), recording every question.
fn builder(seen: &Arc<Seen>, roots: Vec<Root>, protocol: ProtocolChoice) -> ClientBuilder {
    let on_elicit = seen.clone();
    let on_sample = seen.clone();
    let on_log = seen.clone();
    ClientBuilder::new(Implementation::new("toolyard-interop", "1.0"))
        .protocol(protocol)
        .request_timeout(WAIT)
        .handshake_timeout(WAIT)
        .on_elicit(elicit_handler(move |p: ElicitRequestParams| {
            on_elicit.elicit.lock().unwrap().push(p.clone());
            async move {
                let mut answer = ElicitResult::new(ElicitAction::Accept);
                if let ElicitRequestParams::Form(form) = &p {
                    answer.content = Some(fill_form(&form.requested_schema));
                }
                Ok(answer)
            }
        }))
        .on_sample(sample_handler(move |p: CreateMessageRequestParams| {
            on_sample.sample.lock().unwrap().push(p);
            async {
                Ok(CreateMessageResult {
                    role: Role::Assistant,
                    content: SamplingMessageContent::Single(SamplingMessageContentBlock::Text(
                        TextContent::new(SAMPLED),
                    )),
                    model: MODEL.into(),
                    stop_reason: Some("endTurn".into()),
                    meta: None,
                    result_type: None,
                })
            }
        }))
        .on_roots(counted_roots(seen, roots))
        .on_log(move |_| {
            on_log.logs.fetch_add(1, Ordering::SeqCst);
        })
}

/// Answers a form with valid values: our name for `name`, each field's default, else a value
/// of its type.
fn fill_form(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut content = Map::new();
    let Some(Value::Object(props)) = schema.get("properties") else {
        return content;
    };
    for (key, prop) in props {
        let value = if key == "name" {
            json!(ELICITED_NAME)
        } else if let Some(d) = prop.get("default") {
            d.clone()
        } else {
            example_of(prop)
        };
        content.insert(key.clone(), value);
    }
    content
}

/// A value that satisfies a simple JSON schema (the shapes MCP tools and forms use).
fn example_of(schema: &Value) -> Value {
    if let Some(d) = schema.get("default") {
        return d.clone();
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        return values[0].clone();
    }
    if let Some(Value::Array(options)) = schema.get("oneOf").or(schema.get("anyOf")) {
        if let Some(c) = options[0].get("const") {
            return c.clone();
        }
        return example_of(&options[0]);
    }
    let min = schema.get("minimum").and_then(Value::as_f64);
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => match schema.get("format").and_then(Value::as_str) {
            Some("email") => json!("ada@example.com"),
            Some("uri") => json!("https://example.com/ada"),
            Some("date") => json!("1815-12-10"),
            _ => json!("toolyard"),
        },
        Some("integer") => json!(min.map(|m| m.ceil() as i64).unwrap_or(1).max(1)),
        Some("number") => json!(min.unwrap_or(1.0).max(1.0)),
        Some("boolean") => json!(true),
        Some("array") => match schema.get("minItems").and_then(Value::as_u64) {
            Some(n) if n > 0 => json!([example_of(&schema["items"])]),
            _ => json!([]),
        },
        Some("object") => Value::Object(arguments_for(schema)),
        _ => json!("toolyard"),
    }
}

/// Arguments for a tool from its input schema: every required property.
fn arguments_for(schema: &Value) -> Map<String, Value> {
    let mut args = Map::new();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for name in required {
        args.insert(name.to_owned(), example_of(&schema["properties"][name]));
    }
    args
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls a tool and asserts it succeeded (`isError` not true).
async fn call_ok(client: &Client, name: &str, args: Value) -> CallToolResult {
    call_ok_with(client, name, args, &RequestOptions::default()).await
}

async fn call_ok_with(
    client: &Client,
    name: &str,
    args: Value,
    opts: &RequestOptions,
) -> CallToolResult {
    let result = client
        .call_tool_with(name, args.clone(), opts)
        .await
        .unwrap_or_else(|e| panic!("tools/call {name} {args}: {e:?}"));
    assert!(
        !result.failed(),
        "tools/call {name} {args} answered isError: {}",
        text(&result)
    );
    result
}

/// The next notification that `pred` accepts, within [`WAIT`].
async fn notice(
    rx: &mut tokio::sync::broadcast::Receiver<Notice>,
    what: &str,
    pred: impl Fn(&Notice) -> bool,
) -> Notice {
    tokio::time::timeout(WAIT, async {
        loop {
            match rx.recv().await {
                Ok(n) if pred(&n) => return n,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("waiting for {what}: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {what} within {WAIT:?}"))
}

/// A temporary folder, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "toolyard-interop-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temp dir");
        // The servers resolve symlinks (e.g. a /tmp that is one); so do we.
        TempDir(path.canonicalize().expect("canonicalize the temp dir"))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn uri(&self) -> String {
        format!("file://{}", self.0.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server process on a free loopback port, killed (and reaped) when dropped.
pub(crate) struct HttpServer {
    child: Child,
    port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpServer {
    /// Starts server-everything in `mode` (`streamableHttp` or `sse`; it takes its port from
    /// `PORT`) and waits until the port accepts connections.
    pub(crate) fn everything(mode: &str) -> HttpServer {
        let js = everything_js();
        HttpServer::start(&format!("server-everything {mode}"), |port| {
            let mut cmd = Command::new("node");
            cmd.arg(&js).arg(mode).env("PORT", port.to_string());
            cmd
        })
    }

    /// Starts `tests/fixtures/python_sdk_sse_server.py` (the Python SDK over HTTP+SSE) with
    /// the venv's Python and waits until the port accepts connections.
    pub(crate) fn python_sdk_sse() -> HttpServer {
        let python = venv_python("mcp");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python_sdk_sse_server.py");
        HttpServer::start("the Python SDK's HTTP+SSE server", |port| {
            let mut cmd = Command::new(&python);
            cmd.arg(&script).arg(port.to_string());
            cmd
        })
    }

    /// Starts what `command` makes for a port and waits until that port accepts connections.
    fn start(what: &str, command: impl Fn(u16) -> Command) -> HttpServer {
        use std::net::TcpStream;
        let mut last = String::new();
        // The port is free when we look, but another process may take it first: then the
        // server exits at once, and we try another port.
        for _ in 0..3 {
            let port = toolyard_testkit::free_port();
            let child = command(port)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {what}: {e}"));
            let mut server = HttpServer { child, port };
            let deadline = Instant::now() + WAIT;
            loop {
                if let Some(status) = server.child.try_wait().expect("poll the server") {
                    last = format!("{what} exited with {status} on port {port}");
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                assert!(
                    Instant::now() < deadline,
                    "{what} did not listen on port {port} within {WAIT:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("{last}");
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

// --- server-everything -------------------------------------------------------------------

/// Tools that server-everything registers only for clients with the matching capability; we
/// declare elicitation, sampling and roots, so these must be listed.
const CONDITIONAL: [&str; 4] = [
    "get-roots-list",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "trigger-sampling-request",
];

/// Hand-written arguments for the tools whose schema-derived ones would not show much.
fn everything_args(tool: &str) -> Option<Value> {
    let gz_data = format!(
        "data:text/plain;base64,{}",
        base64::engine::general_purpose::STANDARD.encode("compressed by server-everything\n")
    );
    Some(match tool {
        "echo" => json!({"message": "hello from toolyard"}),
        "get-annotated-message" => json!({"messageType": "error", "includeImage": true}),
        "get-resource-links" => json!({"count": 4}),
        "get-resource-reference" => json!({"resourceType": "Text", "resourceId": 3}),
        "get-structured-content" => json!({"location": "Chicago"}),
        "get-sum" => json!({"a": 2, "b": 40}),
        // No network here: a data: URI instead of the default GitHub URL.
        "gzip-file-as-resource" => {
            json!({"name": "toolyard.txt.gz", "data": gz_data, "outputType": "resourceLink"})
        }
        "trigger-long-running-operation" => json!({"duration": 1, "steps": 2}),
        "trigger-sampling-request" => json!({"prompt": "Say hi to toolyard", "maxTokens": 50}),
        "trigger-sampling-request-async" => {
            json!({"prompt": "Say hi to toolyard", "maxTokens": 50})
        }
        "trigger-url-elicitation" => json!({
            "url": "https://example.com/toolyard/consent",
            "message": "Open the consent page",
            "elicitationId": "toolyard-consent-1",
        }),
        "simulate-research-query" => json!({"topic": "actors", "ambiguous": true}),
        _ => return None,
    })
}

/// Everything server-everything offers, through `client`: every tool called (the sampling,
/// elicitation and roots tools answered by our handlers), resources listed, read and
/// subscribed to, prompts listed and got, completions, log level, ping. `stdio` adds checks
/// only a process we spawned allows (its environment).
async fn exercise_everything(client: &Client, seen: &Arc<Seen>, roots_uri: &str, stdio: bool) {
    assert!(
        !client.is_modern(),
        "server-everything speaks only the legacy generation: the probe must fall back"
    );
    let session = client.session().expect("a session");
    assert_eq!(
        session.server_info.as_ref().map(|i| i.name.as_str()),
        Some("mcp-servers/everything")
    );
    assert!(session.instructions.is_some(), "its instructions");
    client.ping().await.expect("ping");
    client
        .set_log_level(LoggingLevel::Debug)
        .await
        .expect("logging/setLevel");

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["echo", "get-sum", "get-tiny-image"]
        .iter()
        .chain(&CONDITIONAL)
    {
        assert!(names.contains(expected), "{expected} not in {names:?}");
    }
    let mut called = Vec::new();
    for tool in &tools {
        let name = tool.name.as_str();
        let args = everything_args(name).unwrap_or_else(|| {
            Value::Object(arguments_for(&Value::Object(tool.input_schema.clone())))
        });
        match name {
            "simulate-research-query" => research_task(client, seen, args).await,
            "toggle-simulated-logging" => toggled_logging(client, seen).await,
            "toggle-subscriber-updates" => toggled_updates(client).await,
            "trigger-long-running-operation" => {
                let progress = Arc::new(AtomicUsize::new(0));
                let count = progress.clone();
                let opts = RequestOptions::default().on_progress(move |_| {
                    count.fetch_add(1, Ordering::SeqCst);
                });
                let r = call_ok_with(client, name, args, &opts).await;
                assert!(text(&r).contains("Steps: 2"), "{}", text(&r));
                assert_eq!(progress.load(Ordering::SeqCst), 2, "one progress per step");
            }
            _ => {
                let r = call_ok(client, name, args).await;
                check_everything_result(client, seen, name, &r, roots_uri, stdio).await;
            }
        }
        called.push(name.to_owned());
    }
    // Every tool this version lists for a client with our capabilities (the two
    // `*-async` tools are listed only to clients that declare task-augmented sampling or
    // elicitation, which this client does not).
    called.sort();
    assert_eq!(
        called,
        [
            "echo",
            "get-annotated-message",
            "get-env",
            "get-resource-links",
            "get-resource-reference",
            "get-roots-list",
            "get-structured-content",
            "get-sum",
            "get-tiny-image",
            "gzip-file-as-resource",
            "simulate-research-query",
            "toggle-simulated-logging",
            "toggle-subscriber-updates",
            "trigger-elicitation-request",
            "trigger-long-running-operation",
            "trigger-sampling-request",
            "trigger-url-elicitation",
        ]
    );

    // The URL elicitation's error path: -32042 carries the elicitation to perform; the
    // same call made again proceeds (the server remembers it issued the prerequisite).
    let args = json!({"url": "https://example.com/toolyard/authorize", "errorPath": true});
    match client
        .call_tool("trigger-url-elicitation", args.clone())
        .await
    {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32042, "{e:?}");
            let elicitations = &e.data.as_ref().expect("error data")["elicitations"];
            assert_eq!(elicitations[0]["mode"], "url", "{e:?}");
        }
        other => panic!("expected a -32042 error, got {other:?}"),
    }
    let retried = call_ok(client, "trigger-url-elicitation", args).await;
    assert!(text(&retried).contains("completed the URL elicitation"));

    // Resources: the static documents, both dynamic templates.
    let resources = client.list_all_resources().await.expect("resources/list");
    assert!(
        resources
            .iter()
            .any(|r| r.uri == "demo://resource/static/document/instructions.md"),
        "{resources:?}"
    );
    for r in resources
        .iter()
        .filter(|r| r.uri.starts_with("demo://resource/static/"))
    {
        let read = client.read_resource(&r.uri).await.expect("resources/read");
        match &read.contents[0] {
            ResourceContents::Text(t) => assert!(!t.text.is_empty(), "{}", r.uri),
            other => panic!("{}: expected text, got {other:?}", r.uri),
        }
    }
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    let templates: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert!(
        templates.contains(&"demo://resource/dynamic/text/{resourceId}")
            && templates.contains(&"demo://resource/dynamic/blob/{resourceId}"),
        "{templates:?}"
    );
    match &client
        .read_resource("demo://resource/dynamic/text/7")
        .await
        .expect("read a text template")
        .contents[0]
    {
        ResourceContents::Text(t) => assert!(t.text.starts_with("Resource 7:"), "{}", t.text),
        other => panic!("expected text, got {other:?}"),
    }
    match &client
        .read_resource("demo://resource/dynamic/blob/8")
        .await
        .expect("read a blob template")
        .contents[0]
    {
        ResourceContents::Blob(b) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&b.blob)
                .expect("base64 blob");
            assert!(String::from_utf8_lossy(&bytes).starts_with("Resource 8:"));
        }
        other => panic!("expected a blob, got {other:?}"),
    }
    let missing = client
        .read_resource("demo://resource/dynamic/text/zero")
        .await;
    assert!(missing.is_err(), "{missing:?}");

    // Prompts.
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let prompt_names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    for p in [
        "simple-prompt",
        "args-prompt",
        "completable-prompt",
        "resource-prompt",
    ] {
        assert!(prompt_names.contains(&p), "{p} not in {prompt_names:?}");
    }
    let prompt_text = |r: &toolyard::proto::GetPromptResult| serde_json::to_value(r).unwrap();
    let simple = client
        .get_prompt("simple-prompt", Value::Null)
        .await
        .expect("simple-prompt");
    assert_eq!(
        prompt_text(&simple)["messages"][0]["content"]["text"],
        "This is a simple prompt without arguments."
    );
    let args = client
        .get_prompt("args-prompt", json!({"city": "Paris", "state": "Texas"}))
        .await
        .expect("args-prompt");
    assert_eq!(
        prompt_text(&args)["messages"][0]["content"]["text"],
        "What's weather in Paris, Texas?"
    );
    let team = client
        .get_prompt(
            "completable-prompt",
            json!({"department": "Sales", "name": "Eve"}),
        )
        .await
        .expect("completable-prompt");
    assert_eq!(
        prompt_text(&team)["messages"][0]["content"]["text"],
        "Please promote Eve to the head of the Sales team."
    );
    let embedded = client
        .get_prompt(
            "resource-prompt",
            json!({"resourceType": "Blob", "resourceId": "2"}),
        )
        .await
        .expect("resource-prompt");
    let embedded = prompt_text(&embedded);
    assert_eq!(embedded["messages"][1]["content"]["type"], "resource");
    assert_eq!(
        embedded["messages"][1]["content"]["resource"]["uri"],
        "demo://resource/dynamic/blob/2"
    );
    let bad = client
        .get_prompt(
            "resource-prompt",
            json!({"resourceType": "Video", "resourceId": "2"}),
        )
        .await;
    assert!(bad.is_err(), "{bad:?}");

    // Completions: of a prompt argument, with context, and of a template variable.
    let complete = |r#ref, name: &str, value: &str, context: Option<(&str, &str)>| {
        let params = CompleteRequestParams {
            meta: None,
            r#ref,
            argument: CompleteArgument {
                name: name.into(),
                value: value.into(),
            },
            context: context.map(|(k, v)| CompleteContext {
                arguments: Some([(k.to_owned(), v.to_owned())].into_iter().collect()),
            }),
        };
        async move { client.complete(params).await.expect("completion/complete") }
    };
    let prompt_ref = || {
        CompleteReference::Prompt(PromptReference {
            name: "completable-prompt".into(),
            title: None,
        })
    };
    let departments = complete(prompt_ref(), "department", "Eng", None).await;
    assert_eq!(departments.completion.values, ["Engineering"]);
    let people = complete(prompt_ref(), "name", "", Some(("department", "Sales"))).await;
    assert_eq!(people.completion.values, ["David", "Eve", "Frank"]);
    let ids = complete(
        CompleteReference::ResourceTemplate(ResourceTemplateReference {
            uri: "demo://resource/dynamic/text/{resourceId}".into(),
        }),
        "resourceId",
        "12",
        None,
    )
    .await;
    assert_eq!(ids.completion.values, ["12"]);

    // Everything asked of our handlers was answered by them.
    assert!(
        seen.roots.load(Ordering::SeqCst) >= 1,
        "roots/list reached our handler"
    );
    assert!(
        seen.elicited()
            .iter()
            .any(|e| matches!(e, ElicitRequestParams::Form(_))),
        "a form elicitation reached our handler"
    );
    assert!(!seen.sampled().is_empty(), "sampling reached our handler");
    client.ping().await.expect("ping at the end");
}

/// What one tool of server-everything must have answered.
async fn check_everything_result(
    client: &Client,
    seen: &Arc<Seen>,
    name: &str,
    r: &CallToolResult,
    roots_uri: &str,
    stdio: bool,
) {
    let t = text(r);
    match name {
        "echo" => assert_eq!(t, "Echo: hello from toolyard"),
        "get-sum" => assert_eq!(t, "The sum of 2 and 40 is 42."),
        "get-annotated-message" => {
            assert!(t.starts_with("Error: Operation failed"), "{t}");
            let v = serde_json::to_value(r).unwrap();
            assert_eq!(v["content"][0]["annotations"]["priority"], 1.0, "{v}");
            assert_eq!(v["content"][1]["type"], "image", "{v}");
        }
        "get-env" => {
            let env: Map<String, Value> = serde_json::from_str(&t).expect("get-env prints JSON");
            assert!(env.contains_key("PATH"), "{env:?}");
            if stdio {
                // The stdio transport gives a server PATH and HOME, not our environment.
                assert!(
                    !env.contains_key("CARGO_MANIFEST_DIR")
                        && !env.contains_key("RUST_TEST_THREADS"),
                    "the server inherited the test's environment: {env:?}"
                );
            }
        }
        "get-tiny-image" => {
            let image = r
                .content
                .iter()
                .find_map(|c| match c {
                    ContentBlock::Image(i) => Some(i),
                    _ => None,
                })
                .expect("an image block");
            assert_eq!(image.mime_type, "image/png");
            let png = base64::engine::general_purpose::STANDARD
                .decode(&image.data)
                .expect("base64 image");
            assert_eq!(&png[..4], b"\x89PNG");
        }
        "get-resource-links" => {
            let links: Vec<_> = r
                .content
                .iter()
                .filter_map(|c| match c {
                    ContentBlock::ResourceLink(l) => Some(l.uri.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(links.len(), 4, "{r:?}");
            for uri in links {
                let read = client
                    .read_resource(&uri)
                    .await
                    .expect("read a linked resource");
                assert_eq!(read.contents.len(), 1, "{uri}");
            }
        }
        "get-resource-reference" => {
            let embedded = r
                .content
                .iter()
                .find_map(|c| match c {
                    ContentBlock::Resource(e) => Some(&e.resource),
                    _ => None,
                })
                .expect("an embedded resource");
            match embedded {
                ResourceContents::Text(t) => {
                    assert_eq!(t.uri, "demo://resource/dynamic/text/3");
                    assert!(t.text.starts_with("Resource 3:"), "{}", t.text);
                }
                other => panic!("expected text, got {other:?}"),
            }
        }
        "get-structured-content" => {
            assert_eq!(
                r.structured_content,
                Some(
                    json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
                )
            );
        }
        "gzip-file-as-resource" => {
            let uri = r
                .content
                .iter()
                .find_map(|c| match c {
                    ContentBlock::ResourceLink(l) => Some(l.uri.clone()),
                    _ => None,
                })
                .expect("a resource link");
            assert_eq!(uri, "demo://resource/session/toolyard.txt.gz");
            let read = client.read_resource(&uri).await.expect("read the gzip");
            match &read.contents[0] {
                ResourceContents::Blob(b) => {
                    let gz = base64::engine::general_purpose::STANDARD
                        .decode(&b.blob)
                        .expect("base64 gzip");
                    assert_eq!(&gz[..2], b"\x1f\x8b", "gzip magic");
                }
                other => panic!("expected a blob, got {other:?}"),
            }
        }
        "get-roots-list" => {
            assert!(t.contains(roots_uri), "our root is not in: {t}");
            assert!(seen.roots.load(Ordering::SeqCst) >= 1);
        }
        "trigger-sampling-request" => {
            assert!(
                t.contains(SAMPLED) && t.contains(MODEL),
                "our sampling answer is not in: {t}"
            );
            let asked = seen.sampled();
            let last = asked.last().expect("the sampling handler was called");
            assert_eq!(last.max_tokens, 50);
            assert_eq!(
                last.system_prompt.as_deref(),
                Some("You are a helpful test server.")
            );
            let msg = serde_json::to_value(&last.messages[0]).unwrap();
            assert!(
                msg["content"]["text"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("Say hi to toolyard")),
                "{msg}"
            );
        }
        "trigger-elicitation-request" => {
            assert!(
                t.contains(&format!("Name: {ELICITED_NAME}")),
                "our elicitation answer is not in: {t}"
            );
            let asked = seen.elicited();
            assert!(
                asked
                    .iter()
                    .any(|e| matches!(e, ElicitRequestParams::Form(f)
                    if f.message == "Please provide inputs for the following fields:")),
                "{asked:?}"
            );
        }
        "trigger-url-elicitation" => {
            assert!(t.contains("completed the URL elicitation"), "{t}");
            assert!(t.contains("toolyard-consent-1"), "{t}");
            let asked = seen.elicited();
            assert!(
                asked.iter().any(|e| matches!(e, ElicitRequestParams::Url(u)
                    if u.url == "https://example.com/toolyard/consent"
                        && u.elicitation_id.as_deref() == Some("toolyard-consent-1"))),
                "{asked:?}"
            );
        }
        "trigger-sampling-request-async" | "trigger-elicitation-request-async" => {
            // Only listed for clients that declare task-augmented sampling/elicitation; we
            // answer at once, which the tool accepts.
            assert!(t.contains("[SYNC]"), "{t}");
        }
        _ => assert!(!r.content.is_empty(), "{name}: {r:?}"),
    }
}

/// `simulate-research-query` needs task augmentation (`execution.taskSupport: required`):
/// start it as a task, watch it with `tasks/get`, and take its result with `tasks/result`,
/// during which the server asks our elicitation handler to clarify the ambiguous topic.
async fn research_task(client: &Client, seen: &Arc<Seen>, args: Value) {
    let created = client
        .request(
            "tools/call",
            json!({"name": "simulate-research-query", "arguments": args, "task": {"ttl": 120000}}),
        )
        .await
        .expect("tools/call as a task");
    let task_id = created["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a CreateTaskResult: {created}"))
        .to_owned();
    let status = client
        .request("tasks/get", json!({"taskId": task_id}))
        .await
        .expect("tasks/get");
    assert_eq!(status["taskId"], task_id.as_str(), "{status}");
    let before = seen.elicited().len();
    let result = client
        .request("tasks/result", json!({"taskId": task_id}))
        .await
        .expect("tasks/result");
    let result: CallToolResult = serde_json::from_value(result).expect("a CallToolResult");
    assert!(!result.failed(), "{}", text(&result));
    let report = text(&result);
    assert!(report.contains("# Research Report: actors"), "{report}");
    // The ambiguous topic was clarified through our elicitation handler.
    let asked = seen.elicited();
    assert!(
        asked.len() > before,
        "the research task asked no clarification"
    );
    assert!(
        report.contains("**Clarification**: technical\n"),
        "{report}"
    );
}

/// `toggle-simulated-logging` twice: on (a log message arrives at once, at our level), off.
async fn toggled_logging(client: &Client, seen: &Arc<Seen>) {
    let mut rx = client.notifications();
    let on = call_ok(client, "toggle-simulated-logging", json!({})).await;
    assert!(text(&on).starts_with("Started"), "{}", text(&on));
    notice(&mut rx, "a simulated log message", |n| {
        n.method == "notifications/message"
            && n.params["data"]
                .as_str()
                .is_some_and(|d| d.contains("-level message") || d.contains("level-message"))
    })
    .await;
    assert!(seen.logs.load(Ordering::SeqCst) >= 1, "on_log was called");
    let off = call_ok(client, "toggle-simulated-logging", json!({})).await;
    assert!(text(&off).starts_with("Stopped"), "{}", text(&off));
}

/// `toggle-subscriber-updates` with a subscribed resource: on (an update for it arrives at
/// once), off; then the subscription is dropped (unsubscribed).
async fn toggled_updates(client: &Client) {
    let uri = "demo://resource/static/document/features.md";
    let mut subscription = client
        .subscribe(SubscriptionFilter {
            resource_subscriptions: Some(vec![uri.into()]),
            ..SubscriptionFilter::default()
        })
        .await
        .expect("resources/subscribe");
    let on = call_ok(client, "toggle-subscriber-updates", json!({})).await;
    assert!(text(&on).starts_with("Started"), "{}", text(&on));
    let updated = tokio::time::timeout(WAIT, async {
        loop {
            let n = subscription.next().await.expect("the client is open");
            if n.method == "notifications/resources/updated" {
                return n;
            }
        }
    })
    .await
    .expect("a resource update within the wait");
    assert_eq!(updated.params["uri"], uri);
    let off = call_ok(client, "toggle-subscriber-updates", json!({})).await;
    assert!(text(&off).starts_with("Stopped"), "{}", text(&off));
    drop(subscription);
}

fn everything_roots(tag: &str) -> (Vec<Root>, String) {
    let uri = format!("file:///tmp/toolyard-{tag}-root");
    (vec![Root::new(uri.clone(), "toolyard root")], uri)
}

#[tokio::test]
async fn server_everything_over_stdio() {
    let js = everything_js();
    let seen = Arc::new(Seen::default());
    let (roots, uri) = everything_roots("stdio");
    let client = builder(&seen, roots, ProtocolChoice::Auto)
        .connect(
            StdioTransport::new("node")
                .arg(&js)
                .arg("stdio")
                .name("server-everything"),
        )
        .await
        .expect("connect to server-everything over stdio");
    exercise_everything(&client, &seen, &uri, true).await;
    tokio::time::timeout(WAIT, client.close())
        .await
        .expect("close");
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let server = HttpServer::everything("streamableHttp");
    let seen = Arc::new(Seen::default());
    let (roots, uri) = everything_roots("http");
    let client = builder(&seen, roots, ProtocolChoice::Auto)
        .connect(toolyard::client::StreamableHttpTransport::new(
            server.url("/mcp"),
        ))
        .await
        .expect("connect to server-everything over Streamable HTTP");
    exercise_everything(&client, &seen, &uri, false).await;
    tokio::time::timeout(WAIT, client.close())
        .await
        .expect("close");
}

#[tokio::test]
async fn server_everything_over_sse() {
    let server = HttpServer::everything("sse");
    let seen = Arc::new(Seen::default());
    let (roots, uri) = everything_roots("sse");
    let client = builder(
        &seen,
        roots,
        ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05),
    )
    .connect(toolyard::client::SseTransport::new(server.url("/sse")))
    .await
    .expect("connect to server-everything over HTTP+SSE");
    exercise_everything(&client, &seen, &uri, false).await;
    tokio::time::timeout(WAIT, client.close())
        .await
        .expect("close");
}

/// The URL of an HTTP+SSE endpoint is enough: the automatic transport's POST is refused (404
/// from server-everything's express app, 405 from the Python SDK's starlette app), and the GET
/// of the same URL opens the SSE stream the client then speaks over, in whichever generation
/// the handshake settles on.
#[tokio::test]
async fn http_sse_servers_of_both_sdks_are_found_from_their_sse_url() {
    for (server, echo, expected) in [
        (
            HttpServer::everything("sse"),
            json!({"message": "found"}),
            "Echo: found",
        ),
        (
            HttpServer::python_sdk_sse(),
            json!({"message": "found"}),
            "found",
        ),
    ] {
        for protocol in [
            ProtocolChoice::Auto,
            ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05),
        ] {
            let url = server.url("/sse");
            let client = ClientBuilder::new(Implementation::new("auto-sse", "1"))
                .protocol(protocol)
                .connect(toolyard::client::StreamableHttpTransport::auto(url.clone()))
                .await
                .unwrap_or_else(|e| panic!("connect to {url} ({protocol:?}): {e}"));
            let tools = client.list_all_tools().await.expect("tools/list");
            assert!(tools.iter().any(|t| t.name == "echo"), "{url}: {tools:?}");
            let r = call_ok(&client, "echo", echo.clone()).await;
            assert_eq!(text(&r), expected, "{url} ({protocol:?})");
            tokio::time::timeout(WAIT, client.close())
                .await
                .expect("close");
        }
    }
}

// --- server-filesystem ---------------------------------------------------------------------

/// `list_allowed_directories`, once the server has taken our roots (it asks for them after
/// the handshake, concurrently with our first requests).
async fn allowed_directories(client: &Client, expect: &Path) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = call_ok(client, "list_allowed_directories", json!({})).await;
        let t = text(&r);
        if t.lines().any(|l| Path::new(l.trim()) == expect) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "{} never became an allowed directory: {t}",
            expect.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn server_filesystem_takes_its_directories_from_our_roots() {
    let js = filesystem_js();
    let first = TempDir::new("fs-a");
    let second = TempDir::new("fs-b");
    std::fs::write(first.path().join("seed.txt"), "planted by the test\n").unwrap();
    std::fs::write(second.path().join("other.txt"), "the second root\n").unwrap();
    let seen = Arc::new(Seen::default());
    // Our roots: the first dir, then (after notifications/roots/list_changed) the second.
    let switched = Arc::new(AtomicBool::new(false));
    let (a, b) = (
        fixed_roots(vec![Root::new(first.uri(), "first")]),
        fixed_roots(vec![Root::new(second.uri(), "second")]),
    );
    let (which, count) = (switched.clone(), seen.clone());
    let roots: RootsHandler = Arc::new(move || {
        count.roots.fetch_add(1, Ordering::SeqCst);
        if which.load(Ordering::SeqCst) {
            b()
        } else {
            a()
        }
    });
    let client = builder(&seen, Vec::new(), ProtocolChoice::Auto)
        .on_roots(roots)
        .connect(
            // No directory arguments: the server must ask for roots.
            StdioTransport::new("node")
                .arg(&js)
                .name("server-filesystem"),
        )
        .await
        .expect("connect to server-filesystem");
    assert!(!client.is_modern());
    let tools = client.list_all_tools().await.expect("tools/list");
    for t in [
        "list_allowed_directories",
        "list_directory",
        "read_text_file",
        "write_file",
    ] {
        assert!(tools.iter().any(|x| x.name == t), "{t} missing");
    }
    allowed_directories(&client, first.path()).await;
    assert!(seen.roots.load(Ordering::SeqCst) >= 1);

    let seed = first.path().join("seed.txt");
    let read = call_ok(
        &client,
        "read_text_file",
        json!({"path": seed.to_str().unwrap()}),
    )
    .await;
    assert_eq!(text(&read), "planted by the test\n");
    let written = first.path().join("from-client.txt");
    call_ok(
        &client,
        "write_file",
        json!({"path": written.to_str().unwrap(), "content": "written through MCP\n"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(&written).expect("the file is on disk"),
        "written through MCP\n"
    );
    let listing = call_ok(
        &client,
        "list_directory",
        json!({"path": first.path().to_str().unwrap()}),
    )
    .await;
    let listing = text(&listing);
    assert!(
        listing.contains("[FILE] seed.txt") && listing.contains("[FILE] from-client.txt"),
        "{listing}"
    );
    // Outside our roots: refused.
    let outside = client
        .call_tool(
            "read_text_file",
            json!({"path": second.path().join("other.txt").to_str().unwrap()}),
        )
        .await;
    assert!(
        matches!(&outside, Ok(r) if r.failed()) || outside.is_err(),
        "read outside the roots: {outside:?}"
    );

    // New roots: the server asks again and follows them.
    switched.store(true, Ordering::SeqCst);
    client
        .notify_roots_changed()
        .await
        .expect("notifications/roots/list_changed");
    allowed_directories(&client, second.path()).await;
    let other = call_ok(
        &client,
        "read_text_file",
        json!({"path": second.path().join("other.txt").to_str().unwrap()}),
    )
    .await;
    assert_eq!(text(&other), "the second root\n");
    assert!(seen.roots.load(Ordering::SeqCst) >= 2);
    tokio::time::timeout(WAIT, client.close())
        .await
        .expect("close");
}

// --- mcp-server-git and mcp-server-time (the Python SDK, both generations) ---------------

const GENERATIONS: [ProtocolChoice; 2] = [
    ProtocolChoice::Auto,
    ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
];

pub(crate) fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Toolyard Test",
            "-c",
            "user.email=test@toolyard.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn mcp_server_git_in_both_generations() {
    let python = venv_python("mcp_server_git");
    let repo = TempDir::new("git");
    git(repo.path(), &["init", "-q"]);
    std::fs::write(repo.path().join("README.md"), "# interop\n").unwrap();
    git(repo.path(), &["add", "README.md"]);
    git(
        repo.path(),
        &["commit", "-q", "-m", "first commit from toolyard"],
    );
    std::fs::write(repo.path().join("README.md"), "# interop\n\nchanged\n").unwrap();
    std::fs::write(repo.path().join("untracked.txt"), "new\n").unwrap();
    let repo_path = repo.path().to_str().unwrap().to_owned();
    for protocol in GENERATIONS {
        let seen = Arc::new(Seen::default());
        let client = builder(&seen, Vec::new(), protocol)
            .connect(
                StdioTransport::new(&python)
                    .args(["-m", "mcp_server_git", "--repository"])
                    .arg(&repo_path)
                    .name("mcp-server-git"),
            )
            .await
            .unwrap_or_else(|e| panic!("connect to mcp-server-git ({protocol:?}): {e}"));
        check_generation(&client, protocol);
        let tools = client.list_all_tools().await.expect("tools/list");
        for t in ["git_status", "git_log", "git_diff_unstaged", "git_show"] {
            assert!(
                tools.iter().any(|x| x.name == t),
                "{t} missing ({protocol:?})"
            );
        }
        let status = text(&call_ok(&client, "git_status", json!({"repo_path": repo_path})).await);
        assert!(
            status.contains("README.md") && status.contains("untracked.txt"),
            "{protocol:?}: {status}"
        );
        let log = text(
            &call_ok(
                &client,
                "git_log",
                json!({"repo_path": repo_path, "max_count": 5}),
            )
            .await,
        );
        assert!(
            log.contains("first commit from toolyard"),
            "{protocol:?}: {log}"
        );
        assert!(log.contains("Toolyard Test"), "{protocol:?}: {log}");
        let diff = text(
            &call_ok(
                &client,
                "git_diff_unstaged",
                json!({"repo_path": repo_path}),
            )
            .await,
        );
        assert!(diff.contains("+changed"), "{protocol:?}: {diff}");
        let show = text(
            &call_ok(
                &client,
                "git_show",
                json!({"repo_path": repo_path, "revision": "HEAD"}),
            )
            .await,
        );
        assert!(show.contains("+# interop"), "{protocol:?}: {show}");
        // A repository outside the one it was given: refused, as a tool error.
        let outside = client
            .call_tool("git_status", json!({"repo_path": "/"}))
            .await;
        assert!(
            matches!(&outside, Ok(r) if r.failed()) || outside.is_err(),
            "{protocol:?}: {outside:?}"
        );
        client.ping().await.expect("ping");
        tokio::time::timeout(WAIT, client.close())
            .await
            .expect("close");
    }
}

/// Auto must reach the 2026-07-28 generation on a server that has it; a pinned legacy
/// version stays legacy.
fn check_generation(client: &Client, protocol: ProtocolChoice) {
    match protocol {
        ProtocolChoice::Auto => assert!(
            client.is_modern(),
            "the Python SDK speaks 2026-07-28: the probe should pick it ({:?})",
            client.protocol_version()
        ),
        ProtocolChoice::Legacy(v) => assert_eq!(client.protocol_version(), Some(v)),
        ProtocolChoice::Modern => assert!(client.is_modern()),
    }
}

/// Regression: a modern server whose answer to the `server/discover` probe comes after the
/// probe timeout (a slow start on a loaded machine) refuses the fallback `initialize` with
/// -32022; the client must then speak 2026-07-28 instead of failing.
#[tokio::test]
async fn a_late_answer_to_the_probe_still_ends_modern() {
    let python = venv_python("mcp_server_time");
    let seen = Arc::new(Seen::default());
    let client = builder(&seen, Vec::new(), ProtocolChoice::Auto)
        .probe_timeout(Duration::from_millis(1))
        .connect(
            StdioTransport::new(&python)
                .args(["-m", "mcp_server_time", "--local-timezone", "UTC"])
                .name("mcp-server-time"),
        )
        .await
        .expect("connect after a timed-out probe");
    assert!(client.is_modern());
    call_ok(&client, "get_current_time", json!({"timezone": "UTC"})).await;
    client.close().await;
}

#[tokio::test]
async fn mcp_server_time_in_both_generations() {
    let python = venv_python("mcp_server_time");
    for protocol in GENERATIONS {
        let seen = Arc::new(Seen::default());
        let client = builder(&seen, Vec::new(), protocol)
            .connect(
                StdioTransport::new(&python)
                    .args(["-m", "mcp_server_time", "--local-timezone", "UTC"])
                    .name("mcp-server-time"),
            )
            .await
            .unwrap_or_else(|e| panic!("connect to mcp-server-time ({protocol:?}): {e}"));
        check_generation(&client, protocol);
        let session = client.session().unwrap();
        assert_eq!(
            session.server_info.as_ref().map(|i| i.name.as_str()),
            Some("mcp-time"),
            "{protocol:?}"
        );
        let tools = client.list_all_tools().await.expect("tools/list");
        let mut names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["convert_time", "get_current_time"], "{protocol:?}");

        let now = call_ok(&client, "get_current_time", json!({"timezone": "UTC"})).await;
        let now = now
            .structured_content
            .clone()
            .or_else(|| serde_json::from_str(&text(&now)).ok())
            .expect("a time result");
        assert_eq!(now["timezone"], "UTC", "{protocol:?}: {now}");
        assert_eq!(now["is_dst"], false, "{protocol:?}: {now}");
        assert!(
            now["datetime"]
                .as_str()
                .is_some_and(|d| d.ends_with("+00:00")),
            "{protocol:?}: {now}"
        );

        let converted = call_ok(
            &client,
            "convert_time",
            json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        )
        .await;
        let converted = converted
            .structured_content
            .clone()
            .or_else(|| serde_json::from_str(&text(&converted)).ok())
            .expect("a conversion result");
        assert_eq!(
            converted["time_difference"], "+9.0h",
            "{protocol:?}: {converted}"
        );
        assert!(
            converted["target"]["datetime"]
                .as_str()
                .is_some_and(|d| d.contains("T21:00:00+09:00")),
            "{protocol:?}: {converted}"
        );

        // A bad timezone is a tool error; an unknown tool a protocol error.
        let bad = client
            .call_tool("get_current_time", json!({"timezone": "Mars/Olympus_Mons"}))
            .await
            .expect("a result");
        assert!(bad.failed(), "{protocol:?}: {bad:?}");
        assert!(text(&bad).contains("Invalid timezone"), "{}", text(&bad));
        let unknown = client.call_tool("no_such_tool", json!({})).await;
        assert!(
            matches!(&unknown, Err(ClientError::Rpc(e)) if e.code == -32602),
            "{protocol:?}: {unknown:?}"
        );
        tokio::time::timeout(WAIT, client.close())
            .await
            .expect("close");
    }
}

// --- Toolyard's own binary as a process ------------------------------------------------------

#[tokio::test]
async fn toolyard_serve_stdio_in_both_generations() {
    for protocol in GENERATIONS {
        let seen = Arc::new(Seen::default());
        let client = builder(
            &seen,
            vec![Root::new("file:///toolyard/smoke", "smoke")],
            protocol,
        )
        .connect(
            StdioTransport::new(env!("CARGO_BIN_EXE_toolyard"))
                .args(["serve", "--stdio"])
                .name("toolyard"),
        )
        .await
        .unwrap_or_else(|e| panic!("connect to toolyard serve --stdio ({protocol:?}): {e}"));
        match protocol {
            ProtocolChoice::Auto => assert!(client.is_modern(), "{:?}", client.protocol_version()),
            _ => assert_eq!(
                client.protocol_version(),
                Some(ProtocolVersion::V2025_11_25)
            ),
        }
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|t| t.name == "echo"), "{protocol:?}");
        let echoed = call_ok(&client, "echo", json!({"message": "across a pipe"})).await;
        assert_eq!(text(&echoed), "across a pipe", "{protocol:?}");
        let hello = call_ok(&client, "ask_name", json!({})).await;
        assert_eq!(
            text(&hello),
            format!("Hello, {ELICITED_NAME}!"),
            "{protocol:?}"
        );
        let summary = call_ok(&client, "summarize", json!({"text": "long"})).await;
        assert_eq!(
            text(&summary),
            format!("Summary: {SAMPLED}"),
            "{protocol:?}"
        );
        let roots = call_ok(&client, "list_roots", json!({})).await;
        assert_eq!(text(&roots), "file:///toolyard/smoke", "{protocol:?}");
        assert_eq!(seen.elicited().len(), 1, "{protocol:?}");
        assert_eq!(seen.sampled().len(), 1, "{protocol:?}");
        let readme = client.read_resource("demo://readme").await.expect("read");
        assert_eq!(readme.contents.len(), 1);
        client.ping().await.expect("ping");
        tokio::time::timeout(WAIT, client.close())
            .await
            .expect("close");
    }
}

// --- a regression these servers found ------------------------------------------------------

/// A scripted legacy server that answers `tools/call` with three progress notifications
/// and the result in one burst, as server-everything's `trigger-long-running-operation` does
/// on its last step.
struct BurstServer;

struct BurstLink(toolyard::client::EventSink);

impl toolyard::client::Transport for BurstServer {
    fn start(
        self: Box<Self>,
        events: toolyard::client::EventSink,
    ) -> toolyard::BoxFuture<
        Result<Arc<dyn toolyard::client::TransportLink>, toolyard::client::TransportError>,
    > {
        Box::pin(async move {
            Ok(Arc::new(BurstLink(events)) as Arc<dyn toolyard::client::TransportLink>)
        })
    }
}

impl toolyard::client::TransportLink for BurstLink {
    fn send(&self, message: toolyard::client::OutboundMessage) {
        let m: Value = serde_json::from_slice(&message.body).expect("JSON");
        let Some(id) = m.get("id").cloned() else {
            return;
        };
        let send = |v: Value| {
            let _ = self.0.send(toolyard::client::TransportEvent::Message(
                v.to_string().into_bytes(),
            ));
        };
        match m["method"].as_str() {
            Some("initialize") => send(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "burst", "version": "1"}}})),
            Some("tools/call") => {
                let token = m["params"]["_meta"]["progressToken"].clone();
                for i in 1..=3 {
                    send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": i, "total": 3}}));
                }
                send(json!({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": "done"}]}}));
            }
            _ => send(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}})),
        }
    }

    fn cancel(&self, _id: &toolyard::proto::RequestId) {}

    fn close(&self) -> toolyard::BoxFuture<()> {
        Box::pin(async {})
    }
}

/// Progress that arrives right before the answer reaches the request's callback: every
/// notification, every time (the answer used to win the race now and then).
#[tokio::test]
async fn progress_sent_just_before_the_answer_is_not_lost() {
    let client = ClientBuilder::new(Implementation::new("burst-client", "1"))
        .connect(BurstServer)
        .await
        .expect("connect to the scripted server");
    assert!(!client.is_modern());
    for round in 0..50 {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let opts = RequestOptions::default().on_progress(move |p| {
            record.lock().unwrap().push(p.progress);
        });
        let r = call_ok_with(&client, "burst", json!({}), &opts).await;
        assert_eq!(text(&r), "done");
        assert_eq!(*seen.lock().unwrap(), [1.0, 2.0, 3.0], "round {round}");
    }
    client.close().await;
}
