//! OpenTelemetry through the binary, with a real OTLP/HTTP receiver on loopback
//! (`toolyard_testkit::OtlpReceiver`): the server's spans and metrics follow the MCP
//! semantic conventions and parent on the `_meta` trace context; a handler's log lines are
//! log records joined to the call's trace; and one call from our client through a gateway,
//! over NATS, to a worker is one trace with correct links.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolyard_testkit::{NatsServer, OtlpReceiver, ReceivedLog, ReceivedSpan};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");
const WAIT: Duration = Duration::from_secs(30);
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

// A child process killed when dropped.
use crate::nats::WorkerProcess as Proc;

fn line(stdin: &mut impl Write, v: Value) {
    writeln!(stdin, "{v}").unwrap();
    stdin.flush().unwrap();
}

/// Opens a legacy session (`initialize` at 2025-11-25, with this id).
fn initialize(stdin: &mut impl Write, id: i64) {
    line(
        stdin,
        json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},
            "clientInfo":{"name":"otel-test","version":"1"}}}),
    );
}

/// Waits for `child` to exit (its stdin closed: it flushes its telemetry as it stops), or
/// fails the test after [`WAIT`].
fn wait_until_stopped(child: &mut std::process::Child) {
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A legacy stdio session with `child` (spawned with piped stdin and stdout): `initialize`,
/// then `requests` (each with an id), read until every one is answered; then end of input,
/// and wait for the server to stop (it flushes its telemetry as it does). The answers, in
/// the order they came.
fn stdio_session(child: &mut std::process::Child, requests: &[Value]) -> Vec<Value> {
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    initialize(&mut stdin, 1);
    line(
        &mut stdin,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    for request in requests {
        line(&mut stdin, request.clone());
    }
    let mut answers = Vec::new();
    let mut buf = String::new();
    while answers.len() < requests.len() + 1 {
        buf.clear();
        assert!(
            stdout.read_line(&mut buf).unwrap() > 0,
            "the server hung up"
        );
        if let Ok(v) = serde_json::from_str::<Value>(&buf) {
            if v.get("id").is_some() {
                answers.push(v);
            }
        }
    }
    drop(stdin);
    wait_until_stopped(child);
    answers
}

/// Asserts that `span` has each of these attributes with this value.
fn assert_attributes(span: &ReceivedSpan, expected: &[(&str, &str)]) {
    for (key, value) in expected {
        assert_eq!(
            span.attributes.get(*key).map(String::as_str),
            Some(*value),
            "{key}: {span:?}"
        );
    }
}

#[test]
fn a_served_request_is_a_server_span_parented_on_its_meta_trace_context_and_a_duration_point() {
    let receiver = OtlpReceiver::start();
    let mut child = Command::new(BIN)
        .args(["serve", "--stdio", "--otel-endpoint", &receiver.url()])
        .env("OTEL_SERVICE_NAME", "otel-stdio-test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start toolyard serve --stdio");
    let parent_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_span = "00f067aa0ba902b7";
    stdio_session(
        &mut child,
        &[
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
                "name":"echo","arguments":{"message":"hi"},
                "_meta":{"traceparent": format!("00-{parent_trace}-{parent_span}-01")}}}),
            // A refused call: the caller's fault, so not a server error.
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no-such-tool"}}),
        ],
    );
    let spans = receiver.wait_for_spans(WAIT, |s| s.iter().any(|s| s.name == "tools/call echo"));
    let call = spans.iter().find(|s| s.name == "tools/call echo").unwrap();
    assert_eq!(call.service, "otel-stdio-test");
    assert_eq!(call.kind, SERVER);
    assert_eq!(
        call.trace_id, parent_trace,
        "the span joins the caller's trace"
    );
    assert_eq!(
        call.parent_span_id, parent_span,
        "its parent is the caller's span"
    );
    assert_attributes(
        call,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "echo"),
            ("gen_ai.operation.name", "execute_tool"),
            ("jsonrpc.request.id", "2"),
            ("mcp.protocol.version", "2025-11-25"),
            ("network.transport", "pipe"),
        ],
    );
    assert_eq!(call.status, 0, "a successful call's status is unset");
    let refused = spans
        .iter()
        .find(|s| s.name == "tools/call no-such-tool")
        .expect("the refused call's span");
    assert_eq!(
        refused.attributes.get("error.type").map(String::as_str),
        Some("-32602")
    );
    assert_eq!(
        refused.status, 0,
        "a caller-fault code is not a server error"
    );
    let points = receiver.points();
    let echo = points
        .iter()
        .find(|p| {
            p.metric == "mcp.server.operation.duration"
                && p.attributes.get("gen_ai.tool.name").map(String::as_str) == Some("echo")
        })
        .unwrap_or_else(|| panic!("a duration point for echo: {points:#?}"));
    assert_eq!(echo.unit, "s");
    assert_eq!(echo.count, 1);
    assert!(
        points
            .iter()
            .any(|p| p.metric == "mcp.server.operation.duration"
                && p.attributes.get("gen_ai.tool.name").map(String::as_str) == Some("_OTHER")),
        "a refused call's made-up name stays off the series: {points:#?}"
    );
}

/// Our own span exporter (plugins/otel/src/otlp) keeps what opentelemetry-otlp's did: the
/// standard headers variable reaches the collector, percent-decoded, and an export the
/// collector sheds with 503 is sent again.
#[test]
fn span_exports_carry_the_otlp_headers_and_are_retried_when_the_collector_sheds_load() {
    let receiver = OtlpReceiver::start();
    receiver.refuse_traces(1);
    let mut child = Command::new(BIN)
        .args(["serve", "--stdio"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url())
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-api-key=s%3Dcret,x-tenant=t1",
        )
        .env("OTEL_METRICS_EXPORTER", "none")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start toolyard serve --stdio");
    stdio_session(
        &mut child,
        &[
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"echo","arguments":{"message":"hi"}}}),
        ],
    );
    let spans = receiver.wait_for_spans(WAIT, |s| s.iter().any(|s| s.name == "tools/call echo"));
    assert_eq!(
        spans.iter().filter(|s| s.name == "tools/call echo").count(),
        1,
        "the span arrives once: {spans:#?}"
    );
    let sent = receiver.trace_headers();
    assert!(sent.len() >= 2, "refused once, then sent again: {sent:#?}");
    for headers in &sent {
        assert_eq!(headers.get("x-api-key").map(String::as_str), Some("s=cret"));
        assert_eq!(headers.get("x-tenant").map(String::as_str), Some("t1"));
        assert_eq!(
            headers.get("content-type").map(String::as_str),
            Some("application/x-protobuf")
        );
    }
    let _ = child.wait();
}

/// `serve --stdio` exporting to `receiver`, with `env`, calls the demo tool `fail` (which
/// logs a warning) under a caller's trace context, then stops (flushing its telemetry).
/// Returns what it wrote on stderr (its text log).
fn call_fail_and_stop(receiver: &OtlpReceiver, env: &[(&str, &str)]) -> String {
    let mut child = Command::new(BIN)
        .args(["serve", "--stdio", "--otel-endpoint", &receiver.url()])
        .env("OTEL_SERVICE_NAME", "otel-logs-test")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolyard serve --stdio");
    let mut stderr = child.stderr.take().unwrap();
    let text = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    stdio_session(
        &mut child,
        &[
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"fail","arguments":{},
            "_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}),
        ],
    );
    let text = text.join().unwrap();
    eprint!("{text}");
    text
}

fn is_fails_warning(l: &ReceivedLog) -> bool {
    l.body.contains("failed, as it always does")
}

/// A warning the `fail` tool logs while it runs is an OTLP log record with the call's
/// SERVER span's trace id and span id, its severity, its fields and the service resource.
#[test]
fn a_tools_warning_is_a_log_record_joined_to_the_calls_server_span() {
    let receiver = OtlpReceiver::start();
    let text_log = call_fail_and_stop(&receiver, &[]);
    let logs = receiver.wait_for_logs(WAIT, |l| l.iter().any(is_fails_warning));
    let spans = receiver.wait_for_spans(WAIT, |s| s.iter().any(|s| s.name == "tools/call fail"));
    let call = spans.iter().find(|s| s.name == "tools/call fail").unwrap();
    assert_eq!(call.kind, SERVER);
    let record = logs.iter().find(|l| is_fails_warning(l)).unwrap();
    assert_eq!(record.trace_id, call.trace_id, "{record:?} {call:?}");
    assert_eq!(record.trace_id, "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(
        record.span_id, call.span_id,
        "the record's span is the call's SERVER span: {record:?}"
    );
    assert_eq!(record.flags & 1, 1, "sampled: {record:?}");
    assert_eq!(record.severity_text, "WARN");
    assert_eq!(record.severity_number, 13);
    assert_eq!(record.service, "otel-logs-test");
    assert_eq!(
        record.attributes.get("tool").map(String::as_str),
        Some("fail"),
        "{record:?}"
    );
    // The same line on stderr carries the same context, in the request span's text
    // (written by the binary's own layer, not the text layer's field formatter).
    let line = text_log
        .lines()
        .find(|l| l.contains("failed, as it always does"))
        .unwrap_or_else(|| panic!("the warning on stderr: {text_log}"));
    assert!(
        line.contains(&format!(
            "mcp{{traceparent=00-0af7651916cd43dd8448eb211c80319c-{}-01}}",
            call.span_id
        )),
        "{line}"
    );
    // The binary's default filter is `warn`: nothing chattier was exported.
    assert!(
        logs.iter().all(|l| l.severity_number >= 13),
        "only what the log filter lets through: {logs:#?}"
    );
}

/// `OTEL_LOGS_EXPORTER=none` leaves logs out and the other signals in; so does
/// `logs = false` in the config file's `[telemetry]`.
#[test]
fn logs_are_left_out_with_otel_logs_exporter_none_or_logs_false() {
    let dir = std::env::temp_dir().join(format!("toolyard-otel-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("toolyard.toml");
    std::fs::write(&config, "[telemetry]\nlogs = false\n").unwrap();
    let config = config.to_string_lossy().into_owned();
    for env in [
        vec![("OTEL_LOGS_EXPORTER", "none")],
        vec![("TOOLYARD_CONFIG", config.as_str())],
    ] {
        let receiver = OtlpReceiver::start();
        call_fail_and_stop(&receiver, &env);
        // Spans are flushed at exit like logs would be: once they are in, logs had their
        // chance.
        receiver.wait_for_spans(WAIT, |s| s.iter().any(|s| s.name == "tools/call fail"));
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            receiver.logs().is_empty(),
            "{env:?}: {:#?}",
            receiver.logs()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn render(spans: &[ReceivedSpan]) -> String {
    fn walk(spans: &[ReceivedSpan], parent: &str, depth: usize, out: &mut String) {
        for s in spans.iter().filter(|s| s.parent_span_id == parent) {
            let kind = match s.kind {
                SERVER => "SERVER",
                CLIENT => "CLIENT",
                _ => "INTERNAL",
            };
            // An HTTP call's span is named after its method alone: its URL tells them apart.
            let url = s
                .attributes
                .get("url.full")
                .map(|u| format!(" {u}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "{}{}{url} [{kind}] ({})\n",
                "  ".repeat(depth),
                s.name,
                s.service
            ));
            walk(spans, &s.span_id, depth + 1, out);
        }
    }
    let mut out = String::new();
    let ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    for root in spans
        .iter()
        .filter(|s| !ids.contains(&s.parent_span_id.as_str()))
    {
        out.push_str(&format!(
            "{} (parent {:?})\n",
            root.name, root.parent_span_id
        ));
        walk(spans, &root.span_id, 1, &mut out);
    }
    out
}

/// A web page on 127.0.0.1 that records the `traceparent` and `baggage` headers of each
/// request for `/` (robots.txt is answered 404): its port and the headers seen.
fn traced_page() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<PageHeaders>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let (port, _) = crate::connectors::http_fake("text/html", move |head| {
        if head.starts_with("GET /robots.txt") {
            return ("404 Not Found", "none");
        }
        let header = |wanted: &str| {
            head.lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case(wanted)
                        .then(|| value.trim().to_owned())
                })
                .unwrap_or_default()
        };
        record.lock().unwrap().push(PageHeaders {
            traceparent: header("traceparent"),
            baggage: header("baggage"),
        });
        ("200 OK", "<html><body><p>traced page</p></body></html>")
    });
    (port, seen)
}

/// The trace headers a page received (empty when absent).
#[derive(Clone, Debug, Default)]
struct PageHeaders {
    traceparent: String,
    baggage: String,
}

/// The HTTP CLIENT span `service` made for its GET of `page` (the `fetch` tool also asks for
/// the site's `robots.txt`, a span of its own).
fn is_page_get(span: &ReceivedSpan, service: &str, page: &str) -> bool {
    span.service == service
        && span.name == "GET"
        && span.attributes.get("url.full").map(String::as_str) == Some(page)
}

/// A config file, in a directory of this test process's own named `name`, that turns on the
/// `fetch` connector for pages on `localhost` (the traced page).
fn fetch_config(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolyard-otel-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("fetch.toml");
    std::fs::write(
        &config,
        "[connectors.fetch]\nallow_hosts = [\"localhost\"]\n",
    )
    .unwrap();
    config
}

/// Our client → `toolyard serve --http --nats` → NATS → `toolyard worker` → the worker's
/// `fetch` tool → a web page: one trace. The client's CLIENT span is the parent of the
/// gateway's SERVER span, whose forwarding CLIENT span is the parent of the worker's SERVER
/// span, the parent of the tool's HTTP CLIENT span, whose context the page receives in the
/// `traceparent` header of the tool's GET.
#[test]
fn a_call_from_our_client_through_a_gateway_and_nats_to_a_workers_tool_and_its_http_call_is_one_trace(
) {
    let receiver = OtlpReceiver::start();
    let nats = NatsServer::start();
    let otel = receiver.url();
    let (site, seen) = traced_page();
    let config = fetch_config("e2e");
    let worker_process = Proc(
        Command::new(BIN)
            .args(["worker", "--nats", &nats.url(), "--name", "w"])
            .args(["--config", config.to_str().unwrap()])
            .args(["--otel-endpoint", &otel])
            .env("OTEL_SERVICE_NAME", "worker")
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the worker"),
    );
    let port = toolyard_testkit::free_port();
    let _gateway = Proc(
        Command::new(BIN)
            .args([
                "serve",
                "--http",
                &format!("127.0.0.1:{port}"),
                "--nats",
                &nats.url(),
            ])
            .args(["--otel-endpoint", &otel])
            .env("OTEL_SERVICE_NAME", "gateway")
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the gateway"),
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    let page = format!("http://localhost:{site}/");
    let deadline = Instant::now() + WAIT;
    loop {
        let out = Command::new(BIN)
            .args(["client", "--url", &url, "--otel-endpoint", &otel])
            .args([
                "call",
                "w__fetch",
                "--args",
                &json!({ "url": page }).to_string(),
            ])
            .env("OTEL_SERVICE_NAME", "client")
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run toolyard client");
        let value: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if value["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("traced page"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the call never went through: {value}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let spans = receiver.wait_for_spans(WAIT, |spans| {
        let worker = spans
            .iter()
            .find(|s| s.service == "worker" && s.name == "tools/call fetch");
        // The gateway exports on its own schedule: wait for the worker's parent to arrive.
        worker.is_some_and(|w| spans.iter().any(|s| s.span_id == w.parent_span_id))
            && spans
                .iter()
                .any(|s| s.service == "client" && s.name == "tools/call w__fetch")
            && spans.iter().any(|s| is_page_get(s, "worker", &page))
    });
    // The successful attempt: the client span whose trace reaches the worker.
    let worker = spans
        .iter()
        .find(|s| s.service == "worker" && s.name == "tools/call fetch")
        .unwrap();
    let trace: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == worker.trace_id)
        .cloned()
        .collect();
    let mut tree = render(&trace);
    // What the page received, as the child of the worker's HTTP CLIENT span.
    let outbound = seen
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap_or_default()
        .traceparent;
    tree.push_str(&format!("(the page received traceparent {outbound})\n"));
    eprintln!("one call's trace:\n{tree}");
    let client = trace
        .iter()
        .find(|s| s.service == "client" && s.name == "tools/call w__fetch")
        .unwrap_or_else(|| panic!("the client span is in the worker's trace:\n{tree}"));
    assert_eq!(client.kind, CLIENT);
    let gateway = trace
        .iter()
        .find(|s| s.service == "gateway" && s.name == "tools/call w__fetch")
        .unwrap_or_else(|| panic!("the gateway span is in the trace:\n{tree}"));
    assert_eq!(gateway.kind, SERVER);
    assert_eq!(gateway.parent_span_id, client.span_id, "{tree}");
    // Served over HTTP: the client's socket is on the span.
    assert_eq!(
        gateway
            .attributes
            .get("network.transport")
            .map(String::as_str),
        Some("tcp"),
        "{gateway:?}"
    );
    assert_eq!(
        gateway
            .attributes
            .get("network.protocol.name")
            .map(String::as_str),
        Some("http"),
        "{gateway:?}"
    );
    assert_eq!(
        gateway.attributes.get("client.address").map(String::as_str),
        Some("127.0.0.1"),
        "{gateway:?}"
    );
    assert!(
        gateway.attributes.contains_key("client.port"),
        "{gateway:?}"
    );
    // The gateway's forwarding over NATS is a client request of its own.
    let forward = trace
        .iter()
        .find(|s| s.service == "gateway" && s.kind == CLIENT)
        .unwrap_or_else(|| panic!("the gateway's CLIENT span over NATS:\n{tree}"));
    assert_eq!(forward.name, "tools/call fetch");
    assert_eq!(forward.parent_span_id, gateway.span_id, "{tree}");
    // Which worker answered: its instance id (`Mcp-Worker`: its process id, a dash, a
    // start time), as the design has it.
    let answered_by = forward
        .attributes
        .get("toolyard.answered_by")
        .unwrap_or_else(|| panic!("the worker that answered: {forward:?}"));
    assert!(
        answered_by.starts_with(&format!("{}-", worker_process.0.id())),
        "{answered_by}"
    );
    assert_eq!(worker.kind, SERVER);
    assert_eq!(worker.parent_span_id, forward.span_id, "{tree}");
    // Taken from the bus: where from, as the messaging conventions say.
    assert_attributes(
        worker,
        &[
            ("network.transport", "tcp"),
            ("network.protocol.name", "nats"),
            ("messaging.system", "nats"),
            ("messaging.destination.name", "mcp.v1.req.*.*.w.>"),
            ("messaging.consumer.group.name", "tyw.w"),
        ],
    );
    // The tool's outbound GET is an HTTP CLIENT span under the worker's, and carries its
    // own context: the page is its child.
    let get = trace
        .iter()
        .find(|s| is_page_get(s, "worker", &page))
        .unwrap_or_else(|| panic!("the worker's HTTP CLIENT span:\n{tree}"));
    assert_eq!(get.kind, CLIENT);
    assert_eq!(get.parent_span_id, worker.span_id, "{tree}");
    assert_attributes(
        get,
        &[
            ("http.request.method", "GET"),
            ("server.address", "localhost"),
            ("server.port", &site.to_string()[..]),
            ("url.full", &page[..]),
            ("http.response.status_code", "200"),
        ],
    );
    assert_eq!(
        outbound,
        format!("00-{}-{}-01", get.trace_id, get.span_id),
        "{tree}"
    );
}

/// A call through a gateway to a stdio source: the gateway's upstream call is a CLIENT span
/// under its SERVER span, the source's SERVER span its child, and the source's tool's GET
/// that span's child, all in the caller's trace; the caller's `baggage` reaches the page as
/// it came (regression: the gateway's upstream calls to its sources started traces of their
/// own and dropped the caller's context). A completion through the gateway's completer is
/// served upstream in the caller's trace too (regression: a completer had no context).
#[test]
fn a_call_through_a_gateway_to_a_stdio_source_is_one_trace_and_keeps_the_callers_baggage() {
    let receiver = OtlpReceiver::start();
    let otel = receiver.url();
    let (site, seen) = traced_page();
    let source_config = fetch_config("gw");
    let config = source_config.with_file_name("gw.toml");
    std::fs::write(
        &config,
        format!(
            "[[sources]]\nname = \"up\"\ncommand = {BIN:?}\n\
             args = [\"serve\", \"--stdio\", \"--config\", {:?}, \"--otel-endpoint\", {otel:?}]\n\
             env = {{ OTEL_SERVICE_NAME = \"upstream\", OTEL_BSP_SCHEDULE_DELAY = \"100\" }}\n",
            source_config.to_str().unwrap()
        ),
    )
    .unwrap();
    let mut gateway = Command::new(BIN)
        .args(["serve", "--stdio", "--config", config.to_str().unwrap()])
        .args(["--otel-endpoint", &otel])
        .env("OTEL_SERVICE_NAME", "gateway")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the gateway");
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let page = format!("http://localhost:{site}/");
    let answers = stdio_session(
        &mut gateway,
        &[
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"up__fetch","arguments":{"url": page},
            "_meta":{"traceparent": format!("00-{trace}-{caller}-01"),
                     "tracestate": "vendor=1",
                     "baggage": "tenant=acme,region=eu"}}}),
            // The demo's completer, through the gateway's completer, in the same trace.
            json!({"jsonrpc":"2.0","id":3,"method":"completion/complete","params":{
            "ref": {"type": "ref/prompt", "name": "up__code_review"},
            "argument": {"name": "language", "value": "ru"},
            "_meta":{"traceparent": format!("00-{trace}-{caller}-01")}}}),
        ],
    );
    // Answered in the order they finish.
    let answer = |id: i64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(
        answer(3)["result"]["completion"]["values"],
        json!(["rust"]),
        "{answers:?}"
    );
    assert!(
        answer(2)["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("traced page")),
        "{answers:?}"
    );
    let completing = |s: &ReceivedSpan| {
        s.service == "upstream" && s.kind == SERVER && s.name.starts_with("completion/complete")
    };
    let spans = receiver.wait_for_spans(WAIT, |spans| {
        spans.iter().any(|s| is_page_get(s, "upstream", &page))
            && spans
                .iter()
                .any(|s| s.service == "gateway" && s.kind == CLIENT)
            && spans.iter().any(completing)
    });
    let tree = render(&spans);
    eprintln!("{tree}");
    let find = |service: &str, name: &str, kind: i32| {
        spans
            .iter()
            .find(|s| s.service == service && s.name == name && s.kind == kind)
            .unwrap_or_else(|| panic!("{service} {name}:\n{tree}"))
    };
    let served = find("gateway", "tools/call up__fetch", SERVER);
    assert_eq!(served.trace_id, trace, "{tree}");
    assert_eq!(served.parent_span_id, caller, "{tree}");
    let upstream_call = find("gateway", "tools/call fetch", CLIENT);
    assert_eq!(upstream_call.parent_span_id, served.span_id, "{tree}");
    let upstream = find("upstream", "tools/call fetch", SERVER);
    assert_eq!(upstream.trace_id, trace, "{tree}");
    assert_eq!(upstream.parent_span_id, upstream_call.span_id, "{tree}");
    let get = spans
        .iter()
        .find(|s| is_page_get(s, "upstream", &page))
        .unwrap_or_else(|| panic!("the upstream's GET of the page:\n{tree}"));
    assert_eq!(get.kind, CLIENT);
    assert_eq!(get.parent_span_id, upstream.span_id, "{tree}");
    let received = seen.lock().unwrap().last().cloned().unwrap_or_default();
    assert_eq!(
        received.traceparent,
        format!("00-{trace}-{}-01", get.span_id),
        "{tree}"
    );
    assert_eq!(received.baggage, "tenant=acme,region=eu");
    // The completion the gateway's completer asked the source is in the caller's trace.
    let completed = spans.iter().find(|s| completing(s)).unwrap();
    assert_eq!(completed.trace_id, trace, "{tree}");
}

/// An exporter pointed at an endpoint that accepts connections and never answers: every
/// request is still answered and every log line written (spans and log records wait in the
/// batch processors' bounded queues, on their own threads), and the process still stops
/// (the export gives up at its timeout).
#[test]
fn an_exporter_pointed_at_a_dead_endpoint_never_holds_up_requests_or_log_lines() {
    dead_endpoint_holds_up_nothing("http/protobuf");
}

/// The same over gRPC: the tonic exporter's connection never completes its handshake.
#[cfg(feature = "otel-grpc")]
#[test]
fn a_grpc_exporter_pointed_at_a_dead_endpoint_never_holds_up_requests_or_log_lines() {
    dead_endpoint_holds_up_nothing("grpc");
}

fn dead_endpoint_holds_up_nothing(protocol: &str) {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", blackhole.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in blackhole.incoming().flatten() {
            held.push(conn);
        }
    });
    let mut child = Command::new(BIN)
        .args(["serve", "--stdio", "--otel-endpoint", &endpoint])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_BSP_SCHEDULE_DELAY", "10")
        .env("OTEL_BLRP_SCHEDULE_DELAY", "10")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "50")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolyard serve --stdio");
    let stderr = child.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let child = Proc(child);
    initialize(&mut stdin, 0);
    let calls = 300;
    // `fail` logs a warning per call: 300 log records for the dead collector too.
    for id in 1..=calls {
        line(
            &mut stdin,
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
                "name":"fail","arguments":{}}}),
        );
    }
    let mut answered = 0;
    let mut buf = String::new();
    while answered < calls + 1 {
        buf.clear();
        assert!(
            stdout.read_line(&mut buf).unwrap() > 0,
            "the server hung up"
        );
        if serde_json::from_str::<Value>(&buf).is_ok_and(|v| v.get("result").is_some()) {
            answered += 1;
        }
    }
    drop(stdin);
    let mut child = child;
    wait_until_stopped(&mut child.0);
    // The spans that never reached the (dead) collector are counted and said at exit.
    let logs = logs.join().unwrap();
    assert!(
        logs.contains("spans were dropped") && logs.contains("dropped=300 ended=300"),
        "{logs}"
    );
    assert_eq!(
        logs.matches("failed, as it always does").count(),
        300,
        "every warning was written: {logs}"
    );
}

/// A collector that is down when the first spans are sent and comes up later: the failure is
/// said once (one warning, however many exports fail), the spans that end once it is up
/// reach it, and its return is said once.
#[test]
fn spans_reach_a_collector_that_comes_up_late_and_the_outage_is_logged_once() {
    let port = crate::http::free_port();
    let mut child = Command::new(BIN)
        .args(["serve", "--stdio", "--log", "info", "--otel-endpoint"])
        .arg(format!("http://127.0.0.1:{port}"))
        .env("OTEL_BSP_SCHEDULE_DELAY", "20")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolyard serve --stdio");
    let (log_tx, log_rx) = std::sync::mpsc::channel::<String>();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for l in stderr.lines().map_while(Result::ok) {
            let _ = log_tx.send(l);
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let child = Proc(child);
    initialize(&mut stdin, 0);
    let mut buf = String::new();
    assert!(
        stdout.read_line(&mut buf).unwrap() > 0,
        "the server hung up"
    );
    let mut call = |id: i64| {
        line(
            &mut stdin,
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
                "name":"echo","arguments":{"message":"hi"}}}),
        );
        let mut buf = String::new();
        assert!(
            stdout.read_line(&mut buf).unwrap() > 0,
            "the server hung up"
        );
        let answer: Value = serde_json::from_str(&buf).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
    };
    let mut logs = Vec::new();
    call(1);
    // The first export fails (nothing listens) and says so.
    let deadline = Instant::now() + WAIT;
    while !logs
        .iter()
        .any(|l: &String| l.contains("span export failed"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match log_rx.recv_timeout(left) {
            Ok(l) => logs.push(l),
            Err(_) => panic!("no export failure was logged: {logs:#?}"),
        }
    }
    call(2);
    let receiver = OtlpReceiver::start_on(port);
    call(3);
    let spans = receiver.wait_for_spans(WAIT, |s| {
        s.iter()
            .any(|s| s.attributes.get("jsonrpc.request.id").map(String::as_str) == Some("3"))
    });
    assert!(
        spans
            .iter()
            .all(|s| s.name == "tools/call echo" || s.name == "initialize"),
        "{spans:#?}"
    );
    // Stopped by its stdin closing: what it logs while it stops is read to the end.
    drop(stdin);
    let mut child = child;
    wait_until_stopped(&mut child.0);
    logs.extend(log_rx.iter());
    let failures = logs
        .iter()
        .filter(|l| l.contains("span export failed"))
        .count();
    assert_eq!(failures, 1, "the outage is said once: {logs:#?}");
    assert!(
        logs.iter().any(|l| l.contains("spans are exported again")),
        "and the collector's return: {logs:#?}"
    );
}

/// `serve --prometheus`: `GET /metrics` answers the MCP duration histogram in the Prometheus
/// text format, with the tool's name as a label, and no OTLP endpoint is needed.
#[test]
fn a_real_prometheus_scrapes_the_mcp_duration_histogram_from_metrics() {
    let server = toolyard_testkit::ServerProcess::start(BIN, &["serve", "--prometheus"]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let text = runtime.block_on(async {
        let client = toolyard::client::ClientBuilder::new(toolyard::proto::Implementation::new(
            "prom-test",
            "1",
        ))
        .connect(toolyard::client::StreamableHttpTransport::new(server.url()))
        .await
        .unwrap();
        let result = client
            .call_tool("echo", json!({"message": "scraped"}))
            .await
            .unwrap();
        assert!(!result.failed());
        client.close().await;
        let response = reqwest::get(format!("{}/metrics", server.base_url()))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        String::from_utf8(response.bytes().await.unwrap().to_vec()).unwrap()
    });
    let series = text
        .lines()
        .find(|l| {
            l.starts_with("mcp_server_operation_duration_seconds_count")
                && l.contains(r#"gen_ai_tool_name="echo""#)
        })
        .unwrap_or_else(|| panic!("no echo series in /metrics:\n{text}"));
    assert!(series.ends_with(" 1"), "{series}");
    assert!(text.contains("# TYPE mcp_server_operation_duration_seconds histogram"));

    // A real Prometheus (Debian's, unpacked by scripts/install-test-deps) scrapes it, and its
    // query API returns our series.
    let prometheus = Prometheus::scraping(&server.base_url());
    let value = runtime.block_on(prometheus.query(
        r#"mcp_server_operation_duration_seconds_count{gen_ai_tool_name="echo",mcp_method_name="tools/call"}"#,
    ));
    assert_eq!(value, "1", "Prometheus has the echo call's count");
}

/// A Prometheus server on a free loopback port scraping one target every 250 ms; killed
/// (with its data directory removed) when dropped.
struct Prometheus {
    child: std::process::Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    fn scraping(base_url: &str) -> Prometheus {
        let bin = toolyard_testkit::cache().join("prometheus/usr/bin/prometheus");
        assert!(
            bin.exists(),
            "{} is missing: run scripts/install-test-deps",
            bin.display()
        );
        let dir = std::env::temp_dir().join(format!("toolyard-it-prom-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = base_url.trim_start_matches("http://");
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\n\
                 scrape_configs:\n  - job_name: toolyard\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let port = toolyard_testkit::free_port();
        let child = Command::new(bin)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        Prometheus { child, dir, port }
    }

    /// The value of the instant query `query`'s first sample, once it has one.
    async fn query(&self, query: &str) -> String {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let client = reqwest::Client::new();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(r) = client.get(&url).query(&[("query", query)]).send().await {
                if let Ok(v) = serde_json::from_slice::<Value>(&r.bytes().await.unwrap_or_default())
                {
                    if let Some(value) = v["data"]["result"][0]["value"][1].as_str() {
                        return value.to_owned();
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus never returned a sample for {query}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[test]
fn opt_in_capture_puts_redacted_tool_arguments_and_results_on_the_span() {
    let receiver = OtlpReceiver::start();
    let dir = std::env::temp_dir().join(format!("toolyard-it-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("toolyard.toml");
    std::fs::write(
        &config,
        "[telemetry.capture]\narguments = true\nresults = true\nmax_bytes = 512\n\
         [connectors.search]\nprovider = \"brave\"\napi_key = \"${TOOLYARD_IT_CAPTURE_KEY}\"\n",
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--stdio",
            "--otel-endpoint",
            &receiver.url(),
            "--config",
        ])
        .arg(&config)
        .env("OTEL_SERVICE_NAME", "otel-capture-test")
        .env("TOOLYARD_IT_CAPTURE_KEY", "brave-key-5f3a9")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start toolyard serve --stdio");
    stdio_session(
        &mut child,
        &[
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"echo","arguments":{"message":"the key is brave-key-5f3a9"}}}),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let spans = receiver.wait_for_spans(WAIT, |s| s.iter().any(|s| s.name == "tools/call echo"));
    let call = spans.iter().find(|s| s.name == "tools/call echo").unwrap();
    let args = call
        .attributes
        .get("gen_ai.tool.call.arguments")
        .unwrap_or_else(|| panic!("arguments captured: {call:?}"));
    assert_eq!(args, r#"{"message":"the key is [REDACTED]"}"#);
    let result = call
        .attributes
        .get("gen_ai.tool.call.result")
        .unwrap_or_else(|| panic!("result captured: {call:?}"));
    assert!(result.contains("the key is [REDACTED]"), "{result}");
    assert!(
        !format!("{call:?}").contains("brave-key-5f3a9"),
        "the configured secret never reaches the span"
    );
}

/// The trace and span a test's `_meta` context names, and those its HTTP `traceparent`
/// header names.
const META_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const META_SPAN: &str = "b7ad6b7169203331";
const HTTP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HTTP_SPAN: &str = "00f067aa0ba902b7";

/// Of a test's two `tools/call echo` spans, both sent with the HTTP `traceparent` header:
/// asserts that the one whose `_meta` had a context parents on it and links the header's,
/// and that the one without parents on the header; returns the latter.
fn header_and_meta_parents(spans: &[ReceivedSpan]) -> &ReceivedSpan {
    let with_meta = spans
        .iter()
        .find(|s| s.name == "tools/call echo" && s.trace_id == META_TRACE)
        .unwrap_or_else(|| panic!("the call with _meta joins its trace: {spans:#?}"));
    assert_eq!(with_meta.parent_span_id, META_SPAN);
    assert_eq!(
        with_meta.links,
        vec![(HTTP_TRACE.to_owned(), HTTP_SPAN.to_owned())],
        "the transport's context is linked"
    );
    let without_meta = spans
        .iter()
        .find(|s| s.name == "tools/call echo" && s.trace_id == HTTP_TRACE)
        .unwrap_or_else(|| panic!("the call without _meta parents on the header: {spans:#?}"));
    assert_eq!(without_meta.parent_span_id, HTTP_SPAN);
    without_meta
}

#[test]
fn an_http_requests_span_parents_on_meta_and_links_the_transports_traceparent() {
    let receiver = OtlpReceiver::start();
    // Export within 100 ms instead of 5 s (nextest runs each test in a process of its own,
    // so the variable reaches only this test's server).
    std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "100");
    let server =
        toolyard_testkit::ServerProcess::start(BIN, &["serve", "--otel-endpoint", &receiver.url()]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        for (id, meta) in [
            (
                1,
                json!({"traceparent": format!("00-{META_TRACE}-{META_SPAN}-01")}),
            ),
            (2, json!({})),
        ] {
            let mut meta = meta;
            meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
            meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
            let response = client
                .post(server.url())
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "echo")
                .header("traceparent", format!("00-{HTTP_TRACE}-{HTTP_SPAN}-01"))
                .body(
                    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                        "name": "echo", "arguments": {"message": "linked"}, "_meta": meta}})
                    .to_string(),
                )
                .send()
                .await
                .unwrap();
            let status = response.status();
            let body = response.text().await.unwrap();
            assert!(
                status.is_success() && body.contains("linked"),
                "{status} {body}"
            );
        }
    });
    let spans = receiver.wait_for_spans(WAIT, |s| {
        s.iter().filter(|s| s.name == "tools/call echo").count() == 2
    });
    drop(server);
    let without_meta = header_and_meta_parents(&spans);
    assert!(without_meta.links.is_empty(), "{without_meta:?}");
}

/// The HTTP+SSE transport (2024-11-05): a POSTed request's own `traceparent` header parents
/// its span when `_meta` carries none, and is linked when `_meta` does, as on Streamable
/// HTTP; the span says where the request came from.
#[test]
fn an_http_sse_posts_trace_headers_parent_or_link_its_span_as_on_streamable_http() {
    use std::io::{Read, Write};
    let receiver = OtlpReceiver::start();
    std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "100");
    let server =
        toolyard_testkit::ServerProcess::start(BIN, &["serve", "--otel-endpoint", &receiver.url()]);
    let host = server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /sse HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let mut read_until = |stream: &mut std::net::TcpStream, needle: &str, seen: &mut String| {
        while !seen.contains(needle) {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the stream closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    read_until(&mut stream, "sessionId=", &mut seen);
    read_until(&mut stream, "\n\n", &mut seen);
    let path = seen
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap()
        .trim()
        .to_owned();
    // Each message in a request of its own on a fresh connection, answered 202.
    let post = |body: Value| {
        let body = body.to_string();
        let mut c = std::net::TcpStream::connect(&host).unwrap();
        write!(
            c,
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             traceparent: 00-{HTTP_TRACE}-{HTTP_SPAN}-01\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    };
    post(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
    );
    read_until(&mut stream, "protocolVersion", &mut seen);
    post(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    post(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"echo","arguments":{"message":"over sse"}}}),
    );
    post(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
        "name":"echo","arguments":{"message":"with meta"},
        "_meta":{"traceparent": format!("00-{META_TRACE}-{META_SPAN}-01")}}}),
    );
    read_until(&mut stream, "with meta", &mut seen);
    read_until(&mut stream, "over sse", &mut seen);
    let spans = receiver.wait_for_spans(WAIT, |s| {
        s.iter().filter(|s| s.name == "tools/call echo").count() == 2
    });
    drop(stream);
    drop(server);
    let without_meta = header_and_meta_parents(&spans);
    assert_attributes(
        without_meta,
        &[
            ("network.transport", "tcp"),
            ("network.protocol.name", "http"),
            ("client.address", "127.0.0.1"),
        ],
    );
}

/// The collector the test installs from PyPI (`rotel`, pinned in tests/interop/requirements.txt):
/// its agent binary in the venv's site-packages.
#[cfg(feature = "otel-grpc")]
fn rotel_agent() -> std::path::PathBuf {
    let lib = toolyard_testkit::cache().join("venv/lib");
    std::fs::read_dir(&lib)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages/rotel/rotel-agent"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no rotel-agent under {}: run scripts/install-test-deps",
                lib.display()
            )
        })
}

/// OTLP over gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, binary feature `otel-grpc`) reaches a
/// real collector that is not ours: rotel takes our spans and duration points over gRPC and
/// relays them over OTLP/HTTP to the test's receiver.
#[cfg(feature = "otel-grpc")]
#[test]
fn spans_and_metrics_exported_over_grpc_reach_a_real_collector() {
    let receiver = OtlpReceiver::start();
    let (grpc, http) = (crate::http::free_port(), crate::http::free_port());
    let collector = Command::new(rotel_agent())
        .args([
            "start",
            "--otlp-grpc-endpoint",
            &format!("127.0.0.1:{grpc}"),
            "--otlp-http-endpoint",
            &format!("127.0.0.1:{http}"),
            "--exporter",
            "otlp",
            "--otlp-exporter-protocol",
            "http",
            "--otlp-exporter-endpoint",
            &receiver.url(),
            "--otlp-exporter-compression",
            "none",
            "--batch-timeout",
            "100ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rotel-agent");
    // Stopped however the test ends.
    let _collector = Proc(collector);
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", grpc)).is_err() {
        assert!(Instant::now() < deadline, "the collector did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut child = Command::new(BIN)
        .args(["serve", "--stdio"])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{grpc}"),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "otel-grpc-test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start toolyard serve --stdio");
    // The server stops at the end of input and flushes spans and metrics over gRPC.
    let answers = stdio_session(
        &mut child,
        &[
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"echo","arguments":{"message":"over grpc"}}}),
        ],
    );
    assert!(
        answers.iter().any(|a| a.to_string().contains("over grpc")),
        "{answers:?}"
    );
    let spans = receiver.wait_for_spans(WAIT, |s| s.iter().any(|s| s.name == "tools/call echo"));
    let call = spans.iter().find(|s| s.name == "tools/call echo").unwrap();
    assert_eq!(call.service, "otel-grpc-test");
    assert_eq!(call.kind, SERVER);
    assert_eq!(
        call.attributes.get("gen_ai.tool.name").map(String::as_str),
        Some("echo")
    );
    while !receiver
        .points()
        .iter()
        .any(|p| p.metric == "mcp.server.operation.duration")
    {
        assert!(
            Instant::now() < deadline,
            "no duration point: {:?}",
            receiver.points()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
