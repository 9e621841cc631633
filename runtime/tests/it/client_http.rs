//! The MCP client's HTTP transports (`client::http`, `client::sse`) against real HTTP on
//! 127.0.0.1: our own server (`toolyard::http` with the demo tools) in-process, and tiny
//! axum handlers for what our server never does (a stream that breaks on purpose).
#![cfg(feature = "http")]

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use toolyard::client::SseTransport;
use toolyard::client::StaticToken;
use toolyard::client::StreamableHttpTransport;
use toolyard::client::{
    Client, ClientBuilder, ClientError, OutboundKind, OutboundMessage, ProtocolChoice,
    RequestOptions, Transport, TransportError, TransportEvent, TransportLink,
};
use toolyard::http::{HttpConfig, Security};
use toolyard::proto::{ContentBlock, Implementation, ProtocolVersion, RequestId};
use toolyard::ServerBuilder;

struct TestServer {
    port: u16,
    task: tokio::task::JoinHandle<()>,
    /// Every `Mcp-Session-Id` the server handed out.
    sessions: Arc<Mutex<Vec<String>>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    async fn ready(&self) -> Value {
        let body = reqwest::get(format!("http://127.0.0.1:{}/readyz", self.port))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// Polls `/readyz` until `what` holds.
    async fn wait_ready(&self, what: &str, check: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.ready().await;
            if check(&now) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {now}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Our server with the demo tools (and these bearer tokens, if any).
async fn start_server(bearer_tokens: &[&str]) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = toolyard_testkit::demo(ServerBuilder::new("client-http-test", "0"))
        .start()
        .await
        .unwrap();
    let config = HttpConfig {
        security: Security {
            bearer_tokens: bearer_tokens.iter().map(|t| t.to_string()).collect(),
            ..Security::loopback()
        },
        ..HttpConfig::default()
    };
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let seen = sessions.clone();
    let app = toolyard::http::router(server, config).await.unwrap().layer(
        axum::middleware::map_response(move |r: axum::response::Response| {
            let seen = seen.clone();
            async move {
                if let Some(sid) = r.headers().get("mcp-session-id") {
                    seen.lock().unwrap().push(sid.to_str().unwrap().to_owned());
                }
                r
            }
        }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    TestServer {
        port,
        task,
        sessions,
    }
}

/// A started transport and what it reports.
struct Conn {
    link: Arc<dyn TransportLink>,
    events: mpsc::UnboundedReceiver<TransportEvent>,
}

impl Conn {
    async fn start(transport: impl Transport) -> Conn {
        Conn::try_start(transport).await.unwrap()
    }

    async fn try_start(transport: impl Transport) -> Result<Conn, TransportError> {
        let (tx, events) = mpsc::unbounded_channel();
        let link = Box::new(transport).start(tx.into()).await?;
        Ok(Conn { link, events })
    }

    async fn event(&mut self) -> TransportEvent {
        tokio::time::timeout(Duration::from_secs(10), self.events.recv())
            .await
            .expect("no transport event within 10 s")
            .expect("the event channel closed")
    }

    /// Reads messages until the answer to `id`: (what came before, the answer).
    async fn answer(&mut self, id: i64) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            match self.event().await {
                TransportEvent::Message(bytes) | TransportEvent::Related { message: bytes, .. } => {
                    let m: Value = serde_json::from_slice(&bytes).unwrap();
                    if m["id"] == json!(id) && m.get("method").is_none() {
                        return (before, m);
                    }
                    before.push(m);
                }
                other => panic!("expected the answer to {id}, got {other:?}"),
            }
        }
    }

    /// The next event, which must be the failure of request `id`.
    async fn failure(&mut self, id: i64) -> TransportError {
        match self.event().await {
            TransportEvent::RequestFailed { id: failed, error } => {
                assert_eq!(failed, RequestId::Number(id));
                error
            }
            TransportEvent::Message(m) | TransportEvent::Related { message: m, .. } => {
                panic!("expected a failure, got {}", String::from_utf8_lossy(&m))
            }
            TransportEvent::Closed(e) => panic!("expected a failure, got Closed({e})"),
        }
    }

    fn request(&self, id: i64, method: &str, params: Value, headers: &[(&str, &str)]) {
        self.link.send(request(id, method, params, headers));
    }

    fn notify(&self, method: &str, headers: &[(&str, &str)]) {
        self.link.send(OutboundMessage {
            body: json!({"jsonrpc":"2.0","method":method})
                .to_string()
                .into_bytes(),
            kind: OutboundKind::Notification {
                method: method.into(),
                headers: owned(headers),
            },
        });
    }
}

fn owned(headers: &[(&str, &str)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn request(id: i64, method: &str, params: Value, headers: &[(&str, &str)]) -> OutboundMessage {
    OutboundMessage {
        body: json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
            .to_string()
            .into_bytes(),
        kind: OutboundKind::Request {
            id: RequestId::Number(id),
            method: method.to_owned().into(),
            headers: owned(headers),
        },
    }
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"},
    })
}

const LEGACY: &str = "2025-11-25";

fn initialize_params(version: &str) -> Value {
    json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}})
}

/// initialize + notifications/initialized over `conn`.
async fn initialize(conn: &mut Conn, id: i64, version: &str) -> Value {
    conn.request(id, "initialize", initialize_params(version), &[]);
    let (_, init) = conn.answer(id).await;
    assert_eq!(init["result"]["protocolVersion"], version, "{init}");
    conn.notify(
        "notifications/initialized",
        &[("MCP-Protocol-Version", version)],
    );
    init
}

#[tokio::test]
async fn modern_discover_and_tools_call_over_streamable_http() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(StreamableHttpTransport::new(s.url())).await;
    c.request(
        1,
        "server/discover",
        json!({"_meta": meta()}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "server/discover"),
        ],
    );
    let (_, d) = c.answer(1).await;
    assert!(
        d["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{d}"
    );
    c.request(
        2,
        "tools/call",
        json!({"_meta": meta(), "name": "echo", "arguments": {"message": "hi"}}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "echo"),
        ],
    );
    let (_, r) = c.answer(2).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["content"][0]["text"], "hi");
    assert!(
        s.sessions.lock().unwrap().is_empty(),
        "modern has no session"
    );
    c.link.close().await;
    assert!(matches!(
        c.event().await,
        TransportEvent::Closed(TransportError::Closed)
    ));
}

#[tokio::test]
async fn a_wrong_mcp_name_header_yields_the_servers_error_as_a_message() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(StreamableHttpTransport::new(s.url())).await;
    c.request(
        1,
        "tools/call",
        json!({"_meta": meta(), "name": "echo", "arguments": {"message": "x"}}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "add"),
        ],
    );
    let (_, r) = c.answer(1).await;
    assert_eq!(r["error"]["code"], -32020, "{r}");
    // An unknown method: 404 with -32601, still a message (no session is involved).
    c.request(
        2,
        "no/such",
        json!({"_meta": meta()}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "no/such"),
        ],
    );
    let (_, r) = c.answer(2).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
}

#[tokio::test]
async fn legacy_session_is_captured_used_and_streams_progress() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(StreamableHttpTransport::new(s.url())).await;
    initialize(&mut c, 1, LEGACY).await;
    assert_eq!(s.sessions.lock().unwrap().len(), 1);
    // After notifications/initialized the standalone GET stream opens.
    s.wait_ready("the GET stream opens", |r| r["streams"] == 1)
        .await;
    let h = [("MCP-Protocol-Version", LEGACY)];
    c.request(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "s"}}),
        &h,
    );
    let (_, r) = c.answer(2).await;
    assert_eq!(r["result"]["content"][0]["text"], "s", "{r}");
    c.request(
        3,
        "tools/call",
        json!({"name": "slow", "arguments": {"steps": 3, "delay_ms": 20}, "_meta": {"progressToken": "p"}}),
        &h,
    );
    let (before, r) = c.answer(3).await;
    let progress = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 3, "{before:?}");
    assert_eq!(r["result"]["content"][0]["text"], "done after 3 steps");
    assert_eq!(s.ready().await["sessions"], 1);
    // Only the one session was ever issued: every request carried it.
    assert_eq!(s.sessions.lock().unwrap().len(), 1);
    c.link.close().await;
    s.wait_ready("DELETE ends the session", |r| {
        r["sessions"] == 0 && r["streams"] == 0
    })
    .await;
}

#[tokio::test]
async fn a_forgotten_session_fails_with_session_expired_then_a_new_one_works() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(StreamableHttpTransport::new(s.url())).await;
    initialize(&mut c, 1, LEGACY).await;
    let sid = s.sessions.lock().unwrap()[0].clone();
    // The server forgets the session (someone else DELETEs it).
    let deleted = reqwest::Client::new()
        .delete(s.url())
        .header("Mcp-Session-Id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let h = [("MCP-Protocol-Version", LEGACY)];
    c.request(2, "ping", json!({}), &h);
    assert!(matches!(c.failure(2).await, TransportError::SessionExpired));
    // The id is dropped: initializing again gets (and then uses) a new session.
    initialize(&mut c, 3, LEGACY).await;
    c.request(
        4,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "again"}}),
        &h,
    );
    let (_, r) = c.answer(4).await;
    assert_eq!(r["result"]["content"][0]["text"], "again");
    let issued = s.sessions.lock().unwrap().clone();
    assert_eq!(issued.len(), 2);
    assert_ne!(issued[0], issued[1]);
    assert_eq!(s.ready().await["sessions"], 1);
    c.link.close().await;
    s.wait_ready("DELETE ends the session", |r| r["sessions"] == 0)
        .await;
}

#[tokio::test]
async fn cancel_closes_the_stream_of_a_modern_call() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(StreamableHttpTransport::new(s.url())).await;
    let mut m = meta();
    m["progressToken"] = json!("p");
    c.request(
        1,
        "tools/call",
        json!({"_meta": m, "name": "slow", "arguments": {"steps": 100, "delay_ms": 50}}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "slow"),
        ],
    );
    // What arrives on a request's stream is tied to that request.
    match c.event().await {
        TransportEvent::Related {
            message: b,
            request,
        } => {
            assert_eq!(request, RequestId::Number(1));
            let p: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(p["method"], "notifications/progress", "{p}");
        }
        other => panic!("expected progress, got {other:?}"),
    }
    assert_eq!(s.ready().await["inFlight"], 1);
    c.link.cancel(&RequestId::Number(1));
    s.wait_ready("the call is cancelled", |r| {
        r["inFlight"] == 0 && r["streams"] == 0
    })
    .await;
    // Nothing more is reported for the cancelled request.
    let quiet = tokio::time::timeout(Duration::from_millis(200), c.events.recv()).await;
    assert!(quiet.is_err(), "{quiet:?}");
}

#[tokio::test]
async fn http_sse_transport_initializes_and_calls_a_tool() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(SseTransport::new(format!(
        "http://127.0.0.1:{}/sse",
        s.port
    )))
    .await;
    assert_eq!(s.ready().await["sessions"], 1, "the GET opened a session");
    initialize(&mut c, 1, "2024-11-05").await;
    c.request(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "old"}}),
        &[],
    );
    let (_, r) = c.answer(2).await;
    assert_eq!(r["result"]["content"][0]["text"], "old");
    c.request(
        3,
        "tools/call",
        json!({"name": "slow", "arguments": {"steps": 2, "delay_ms": 10}, "_meta": {"progressToken": 7}}),
        &[],
    );
    let (before, r) = c.answer(3).await;
    assert_eq!(
        before
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .count(),
        2
    );
    assert_eq!(r["result"]["content"][0]["text"], "done after 2 steps");
    c.link.close().await;
    s.wait_ready("closing the stream ends the session", |r| {
        r["sessions"] == 0 && r["streams"] == 0
    })
    .await;
}

#[tokio::test]
async fn the_end_of_the_sse_stream_closes_the_http_sse_transport() {
    // A server that announces the endpoint and hangs up.
    let app = axum::Router::new().route(
        "/sse",
        axum::routing::get(|| async {
            (
                [("content-type", "text/event-stream")],
                "event: endpoint\ndata: /messages?sessionId=1\n\n",
            )
        }),
    );
    let port = serve(app).await;
    let mut c = Conn::start(SseTransport::new(format!("http://127.0.0.1:{port}/sse"))).await;
    match c.event().await {
        TransportEvent::Closed(TransportError::Io(m)) => assert!(m.contains("ended"), "{m}"),
        other => panic!("expected Closed, got {other:?}"),
    }
    // An endpoint on another origin is refused; no endpoint event at all times out.
    let app = axum::Router::new()
        .route(
            "/evil",
            axum::routing::get(|| async {
                (
                    [("content-type", "text/event-stream")],
                    "event: endpoint\ndata: http://example.com/messages\n\n",
                )
            }),
        )
        .route(
            "/silent",
            axum::routing::get(|| async {
                let stream = futures_util::stream::pending::<Result<String, std::io::Error>>();
                (
                    [("content-type", "text/event-stream")],
                    axum::body::Body::from_stream(stream),
                )
            }),
        );
    let port = serve(app).await;
    let evil = Conn::try_start(SseTransport::new(format!("http://127.0.0.1:{port}/evil"))).await;
    assert!(matches!(evil, Err(TransportError::Malformed(_))));
    let started = Instant::now();
    let silent = Conn::try_start(
        SseTransport::new(format!("http://127.0.0.1:{port}/silent"))
            .endpoint_timeout(Duration::from_millis(300)),
    )
    .await;
    assert!(matches!(silent, Err(TransportError::Io(_))));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_server_that_is_down_fails_requests_with_io_promptly() {
    let closed = toolyard_testkit::ClosedPort::new();
    let port = closed.port();
    let mut c = Conn::start(StreamableHttpTransport::new(format!(
        "http://127.0.0.1:{port}/mcp"
    )))
    .await;
    let started = Instant::now();
    c.notify("notifications/initialized", &[]);
    c.request(1, "initialize", initialize_params(LEGACY), &[]);
    assert!(matches!(c.failure(1).await, TransportError::Io(_)));
    assert!(started.elapsed() < Duration::from_secs(2));
    // Not closed: the next request is tried (and fails) on its own.
    c.request(2, "ping", json!({}), &[]);
    assert!(matches!(c.failure(2).await, TransportError::Io(_)));
    let sse = Conn::try_start(SseTransport::new(format!("http://127.0.0.1:{port}/sse"))).await;
    assert!(matches!(sse, Err(TransportError::Io(_))));
}

/// Serves `app` on 127.0.0.1 (the task ends with the test's runtime).
async fn serve(app: axum::Router) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

#[derive(Default)]
struct Seen {
    /// When the POST's stream ended.
    post_done: Option<Instant>,
    /// The GETs: (when, Last-Event-ID).
    gets: Vec<(Instant, Option<String>)>,
}

#[tokio::test]
async fn a_broken_stream_resumes_with_last_event_id_after_retry() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (on_post, on_get) = (seen.clone(), seen.clone());
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |body: String| {
            let seen = on_post.clone();
            async move {
                let v: Value = serde_json::from_str(&body).unwrap();
                seen.lock().unwrap().post_done = Some(Instant::now());
                if v["id"] == 2 {
                    // No event id: nothing to resume from.
                    return (
                        [("content-type", "text/event-stream")],
                        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n",
                    );
                }
                // A priming event, then the server hangs up.
                (
                    [("content-type", "text/event-stream")],
                    "id: e1\nretry: 300\ndata:\n\n",
                )
            }
        })
        .get(move |headers: HeaderMap| {
            let seen = on_get.clone();
            async move {
                let last = headers
                    .get("last-event-id")
                    .map(|v| v.to_str().unwrap().to_owned());
                seen.lock().unwrap().gets.push((Instant::now(), last.clone()));
                if last.as_deref() != Some("e1") {
                    return StatusCode::METHOD_NOT_ALLOWED.into_response();
                }
                (
                    [("content-type", "text/event-stream")],
                    "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n\n",
                )
                    .into_response()
            }
        }),
    );
    let port = serve(app).await;
    let mut c = Conn::start(StreamableHttpTransport::new(format!(
        "http://127.0.0.1:{port}/mcp"
    )))
    .await;
    c.request(1, "tools/call", json!({}), &[]);
    let (_, r) = c.answer(1).await;
    assert_eq!(r["result"]["ok"], true);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.gets.len(), 1);
        let (at, last) = &seen.gets[0];
        assert_eq!(last.as_deref(), Some("e1"));
        let waited = at.duration_since(seen.post_done.unwrap());
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_millis(500),
            "reconnected after {waited:?}"
        );
    }
    // A stream that ends without any event id fails its request.
    c.request(2, "tools/call", json!({}), &[]);
    match c.event().await {
        TransportEvent::Related {
            message: m,
            request,
        } => {
            assert_eq!(request, RequestId::Number(2));
            assert!(String::from_utf8_lossy(&m).contains("notifications/message"))
        }
        other => panic!("expected the notification, got {other:?}"),
    }
    match c.failure(2).await {
        TransportError::Io(m) => assert!(m.contains("before the response"), "{m}"),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[tokio::test]
async fn a_static_bearer_token_reaches_a_protected_server() {
    let s = start_server(&["s3cret"]).await;
    let mut c = Conn::start(
        StreamableHttpTransport::new(s.url())
            .auth(Arc::new(StaticToken("s3cret".into())))
            .header("X-Custom", "yes"),
    )
    .await;
    let h = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    c.request(1, "tools/list", json!({"_meta": meta()}), &h);
    let (_, r) = c.answer(1).await;
    assert!(r["result"]["tools"].is_array(), "{r}");
    // A wrong token: the static provider gives up, the request fails with Auth.
    let mut bad = Conn::start(
        StreamableHttpTransport::new(s.url()).auth(Arc::new(StaticToken("nope".into()))),
    )
    .await;
    bad.request(1, "tools/list", json!({"_meta": meta()}), &h);
    assert!(matches!(bad.failure(1).await, TransportError::Auth(_)));
    // No provider at all: Auth too.
    let mut none = Conn::start(StreamableHttpTransport::new(s.url())).await;
    none.request(1, "tools/list", json!({"_meta": meta()}), &h);
    assert!(matches!(none.failure(1).await, TransportError::Auth(_)));
    // The old transport carries the token on its GET and POSTs.
    let mut old = Conn::start(
        SseTransport::new(format!("http://127.0.0.1:{}/sse", s.port))
            .auth(Arc::new(StaticToken("s3cret".into()))),
    )
    .await;
    initialize(&mut old, 1, "2024-11-05").await;
    let refused = Conn::try_start(SseTransport::new(format!(
        "http://127.0.0.1:{}/sse",
        s.port
    )))
    .await;
    assert!(matches!(refused, Err(TransportError::Auth(_))));
}

// The `Client` over both HTTP transports.

fn client(protocol: ProtocolChoice) -> ClientBuilder {
    ClientBuilder::new(Implementation::new("http-client", "1")).protocol(protocol)
}

fn text(result: &toolyard::proto::CallToolResult) -> String {
    match &result.content[0] {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Lists, calls, follows progress, and cancels a call by dropping it.
async fn exercise(client: &Client, s: &TestServer, label: &str) {
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "slow"), "{label}");
    let r = client
        .call_tool("echo", json!({"message": "over http"}))
        .await
        .unwrap();
    assert_eq!(text(&r), "over http", "{label}");
    let sum = client
        .call_tool("add", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum.structured_content, Some(json!({"sum": 5.0})), "{label}");
    let steps = Arc::new(Mutex::new(0));
    let seen = steps.clone();
    let r = client
        .call_tool_with(
            "slow",
            json!({"steps": 3, "delay_ms": 20}),
            &RequestOptions::default().on_progress(move |_| *seen.lock().unwrap() += 1),
        )
        .await
        .unwrap();
    assert_eq!(text(&r), "done after 3 steps", "{label}");
    assert_eq!(*steps.lock().unwrap(), 3, "{label}");
    client.ping().await.unwrap();
    // Dropping a call cancels it on the server (modern: its stream closes; legacy:
    // notifications/cancelled).
    let caller = client.clone();
    let call = tokio::spawn(async move {
        caller
            .call_tool("slow", json!({"steps": 200, "delay_ms": 50}))
            .await
    });
    s.wait_ready(label, |r| r["inFlight"] == 1).await;
    call.abort();
    s.wait_ready(label, |r| r["inFlight"] == 0).await;
}

#[tokio::test]
async fn the_client_over_streamable_http_in_both_generations() {
    let s = start_server(&[]).await;
    let c = client(ProtocolChoice::Auto)
        .connect(StreamableHttpTransport::new(s.url()))
        .await
        .unwrap();
    assert!(c.is_modern());
    exercise(&c, &s, "modern").await;
    c.close().await;
    assert!(
        s.sessions.lock().unwrap().is_empty(),
        "modern has no session"
    );

    let c = client(ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25))
        .connect(StreamableHttpTransport::new(s.url()))
        .await
        .unwrap();
    assert_eq!(c.protocol_version(), Some(ProtocolVersion::V2025_11_25));
    assert_eq!(s.ready().await["sessions"], 1);
    exercise(&c, &s, "legacy").await;
    c.close().await;
    s.wait_ready("close ends the session", |r| {
        r["sessions"] == 0 && r["streams"] == 0
    })
    .await;
    assert!(matches!(
        c.call_tool("echo", json!({"message": "late"})).await,
        Err(ClientError::Closed)
    ));
}

#[tokio::test]
async fn the_client_initializes_again_when_the_server_forgets_its_session() {
    let s = start_server(&[]).await;
    let c = client(ProtocolChoice::Legacy(ProtocolVersion::V2025_06_18))
        .connect(StreamableHttpTransport::new(s.url()))
        .await
        .unwrap();
    let sid = s.sessions.lock().unwrap()[0].clone();
    let deleted = reqwest::Client::new()
        .delete(s.url())
        .header("Mcp-Session-Id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let r = c
        .call_tool("echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(text(&r), "still here");
    assert_eq!(s.sessions.lock().unwrap().len(), 2, "a second session");
    c.close().await;
}

#[tokio::test]
async fn the_client_over_http_sse_in_both_generations() {
    let s = start_server(&[]).await;
    let url = format!("http://127.0.0.1:{}/sse", s.port);
    for protocol in [
        ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05),
        ProtocolChoice::Auto,
    ] {
        let c = client(protocol)
            .connect(SseTransport::new(url.clone()))
            .await
            .unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        assert_eq!(
            c.is_modern(),
            matches!(protocol, ProtocolChoice::Auto),
            "{protocol:?}"
        );
        let tools = c.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "echo"), "{protocol:?}");
        let r = c
            .call_tool("echo", json!({"message": "sse"}))
            .await
            .unwrap();
        assert_eq!(text(&r), "sse", "{protocol:?}");
        let steps = Arc::new(Mutex::new(0));
        let seen = steps.clone();
        let r = c
            .call_tool_with(
                "slow",
                json!({"steps": 2, "delay_ms": 10}),
                &RequestOptions::default().on_progress(move |_| *seen.lock().unwrap() += 1),
            )
            .await
            .unwrap();
        assert_eq!(text(&r), "done after 2 steps", "{protocol:?}");
        assert_eq!(*steps.lock().unwrap(), 2, "{protocol:?}");
        c.close().await;
        s.wait_ready("closing the stream ends the session", |r| {
            r["sessions"] == 0 && r["streams"] == 0
        })
        .await;
    }
}

#[tokio::test]
async fn the_client_reaches_a_bearer_protected_server_and_reports_a_refusal() {
    let s = start_server(&["s3cret"]).await;
    for protocol in [
        ProtocolChoice::Auto,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        let c = client(protocol)
            .connect(
                StreamableHttpTransport::new(s.url()).auth(Arc::new(StaticToken("s3cret".into()))),
            )
            .await
            .unwrap();
        let r = c.call_tool("echo", json!({"message": "ok"})).await.unwrap();
        assert_eq!(text(&r), "ok");
        c.close().await;
        let refused = client(protocol)
            .connect(
                StreamableHttpTransport::new(s.url()).auth(Arc::new(StaticToken("nope".into()))),
            )
            .await;
        assert!(
            matches!(refused, Err(ClientError::Auth(_))),
            "{protocol:?}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn connecting_to_a_server_that_is_down_fails_promptly() {
    let closed = toolyard_testkit::ClosedPort::new();
    let port = closed.port();
    let started = Instant::now();
    let r = client(ProtocolChoice::Auto)
        .connect(StreamableHttpTransport::new(format!(
            "http://127.0.0.1:{port}/mcp"
        )))
        .await;
    assert!(
        matches!(r, Err(ClientError::Transport(TransportError::Io(_)))),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

// The automatic HTTP transport: Streamable HTTP, or HTTP+SSE when the POST is refused.

/// What the first request to an HTTP+SSE endpoint (`/sse`, where POST is 405) gets through
/// the automatic transport: its answer, over the 2024-11-05 transport, whether it is the
/// legacy `initialize` or a modern request.
#[tokio::test]
async fn the_automatic_transport_falls_back_to_http_sse_for_either_first_request() {
    let s = start_server(&[]).await;
    let sse = format!("http://127.0.0.1:{}/sse", s.port);
    let mut c = Conn::start(StreamableHttpTransport::auto(sse.clone())).await;
    initialize(&mut c, 1, "2024-11-05").await;
    assert_eq!(s.ready().await["sessions"], 1, "one HTTP+SSE session");
    c.request(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "fell back"}}),
        &[],
    );
    let (_, r) = c.answer(2).await;
    assert_eq!(r["result"]["content"][0]["text"], "fell back", "{r}");
    c.link.close().await;
    s.wait_ready("closing ends the HTTP+SSE session", |r| {
        r["sessions"] == 0 && r["streams"] == 0
    })
    .await;

    let mut c = Conn::start(StreamableHttpTransport::auto(sse)).await;
    c.request(
        1,
        "server/discover",
        json!({"_meta": meta()}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "server/discover"),
        ],
    );
    let (_, d) = c.answer(1).await;
    assert!(d.get("result").is_some() || d.get("error").is_some(), "{d}");
    assert_eq!(s.ready().await["sessions"], 1, "over HTTP+SSE");
    c.link.close().await;
}

/// At a Streamable HTTP endpoint the automatic transport stays there: a modern error answer
/// (400 or 404 with the request's JSON-RPC error) is an answer, not a reason to fall back.
#[tokio::test]
async fn the_automatic_transport_stays_on_streamable_http_and_takes_modern_errors_as_answers() {
    let s = start_server(&[]).await;
    let mut c = Conn::start(StreamableHttpTransport::auto(s.url())).await;
    c.request(
        1,
        "tools/call",
        json!({"_meta": meta(), "name": "echo", "arguments": {"message": "x"}}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "add"),
        ],
    );
    let (_, r) = c.answer(1).await;
    assert_eq!(r["error"]["code"], -32020, "{r}");
    c.request(
        2,
        "no/such",
        json!({"_meta": meta()}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "no/such"),
        ],
    );
    let (_, r) = c.answer(2).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert_eq!(
        s.ready().await["sessions"],
        0,
        "no HTTP+SSE session was opened"
    );
    c.link.close().await;

    let client = client(ProtocolChoice::Auto)
        .connect(StreamableHttpTransport::auto(s.url()))
        .await
        .unwrap();
    assert!(client.is_modern());
    exercise(&client, &s, "automatic, modern").await;
    client.close().await;
    assert!(
        s.sessions.lock().unwrap().is_empty(),
        "modern has no session"
    );
}

/// The `Client` over the automatic transport at `/sse`, probing or pinned to 2024-11-05.
#[tokio::test]
async fn the_client_over_the_automatic_transport_reaches_an_http_sse_endpoint() {
    let s = start_server(&[]).await;
    let url = format!("http://127.0.0.1:{}/sse", s.port);
    for protocol in [
        ProtocolChoice::Auto,
        ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05),
    ] {
        let c = client(protocol)
            .connect(StreamableHttpTransport::auto(url.clone()))
            .await
            .unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        let tools = c.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "echo"), "{protocol:?}");
        let r = c
            .call_tool("echo", json!({"message": "auto"}))
            .await
            .unwrap();
        assert_eq!(text(&r), "auto", "{protocol:?}");
        assert_eq!(
            s.ready().await["sessions"],
            1,
            "{protocol:?}: over HTTP+SSE"
        );
        c.close().await;
        s.wait_ready("closing the stream ends the session", |r| {
            r["sessions"] == 0 && r["streams"] == 0
        })
        .await;
    }
}

/// A URL that answers 404 to everything: the request fails with an error that names both
/// attempts (the POST and the GET, and their statuses), and so does `connect`.
#[tokio::test]
async fn the_automatic_transport_names_both_attempts_when_neither_works() {
    let port = serve(axum::Router::new()).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut c = Conn::start(StreamableHttpTransport::auto(url.clone())).await;
    c.request(1, "initialize", initialize_params(LEGACY), &[]);
    let e = c.failure(1).await.to_string();
    for needle in [
        "Streamable HTTP",
        "POST",
        "HTTP+SSE",
        "GET",
        "404",
        url.as_str(),
    ] {
        assert!(e.contains(needle), "{needle:?} not in {e:?}");
    }
    // Still undecided: the next request tries both again.
    c.request(2, "ping", json!({}), &[]);
    let e = c.failure(2).await.to_string();
    assert!(e.contains("HTTP+SSE"), "{e}");

    let r = client(ProtocolChoice::Auto)
        .connect(StreamableHttpTransport::auto(url.clone()))
        .await;
    let e = r.expect_err("nothing to connect to").to_string();
    for needle in ["Streamable HTTP", "HTTP+SSE", "404"] {
        assert!(e.contains(needle), "{needle:?} not in {e:?}");
    }
}

/// `[[clients]]` entries: a `url` without `transport` is automatic (and reaches `/sse`);
/// `transport = "http"` pins Streamable HTTP, which `/sse` refuses.
#[tokio::test]
async fn a_clients_entry_without_transport_reaches_an_http_sse_endpoint() {
    let s = start_server(&[]).await;
    let sse = format!("http://127.0.0.1:{}/sse", s.port);
    let entries = |extra: &str| {
        toml::from_str::<toolyard::client::ClientsConfig>(&format!(
            "[[clients]]\nname = \"old\"\nurl = \"{sse}\"\n{extra}\n"
        ))
        .unwrap()
        .clients
    };
    let registry = toolyard::client::ClientRegistry::connect(
        &entries(""),
        Implementation::new("registry", "1"),
    )
    .await
    .unwrap();
    let r = registry
        .get("old")
        .unwrap()
        .call_tool("echo", json!({"message": "by name"}))
        .await
        .unwrap();
    assert_eq!(text(&r), "by name");
    registry.close().await;
    let pinned = toolyard::client::ClientRegistry::connect(
        &entries("transport = \"http\""),
        Implementation::new("registry", "1"),
    )
    .await;
    let e = pinned
        .expect_err("Streamable HTTP at /sse fails")
        .to_string();
    assert!(e.contains("405"), "{e}");
}

/// A minimal modern (2026-07-28) server over Streamable HTTP, written out on the wire:
/// `server/discover` announces `tools.listChanged`, `tools/list` lists nothing, and
/// `subscriptions/listen` gets what `listen` answers (status, content type, body).
async fn raw_modern_server(
    listen: impl Fn(&Value) -> (StatusCode, &'static str, String) + Clone + Send + Sync + 'static,
) -> u16 {
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |body: String| {
            let listen = listen.clone();
            async move {
                let v: Value = serde_json::from_str(&body).unwrap();
                let id = v["id"].clone();
                let json = |result: Value| {
                    (
                        StatusCode::OK,
                        "application/json",
                        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
                    )
                };
                let (status, content_type, body) = match v["method"].as_str() {
                    Some("server/discover") => json(json!({
                        "supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {"listChanged": true}},
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "raw", "version": "1"}},
                    })),
                    Some("tools/list") => json(json!({"tools": []})),
                    Some("subscriptions/listen") => listen(&v),
                    _ => (
                        StatusCode::NOT_FOUND,
                        "application/json",
                        json!({"jsonrpc": "2.0", "id": id,
                               "error": {"code": -32601, "message": "Method not found"}})
                        .to_string(),
                    ),
                };
                (status, [("content-type", content_type)], body).into_response()
            }
        }),
    );
    serve(app).await
}

/// A client whose request timeout is far longer than any test: what ends in a test ends
/// because the answer came, not because a timeout struck.
async fn patient_modern_client(port: u16) -> Client {
    ClientBuilder::new(Implementation::new("test-client", "1.0"))
        .protocol(ProtocolChoice::Modern)
        .request_timeout(Duration::from_secs(600))
        .connect(StreamableHttpTransport::new(format!(
            "http://127.0.0.1:{port}/mcp"
        )))
        .await
        .unwrap()
}

#[tokio::test]
async fn subscribe_fails_at_once_with_the_servers_error_when_it_refuses_subscriptions_listen() {
    let port = raw_modern_server(|v| {
        (
            StatusCode::NOT_FOUND,
            "application/json",
            json!({"jsonrpc": "2.0", "id": v["id"],
                   "error": {"code": -32601, "message": "Method not found"}})
            .to_string(),
        )
    })
    .await;
    let client = patient_modern_client(port).await;
    let filter = toolyard::proto::SubscriptionFilter {
        tools_list_changed: Some(true),
        ..Default::default()
    };
    // Far below the 600 s request timeout: the refusal itself must end the wait.
    let r = tokio::time::timeout(Duration::from_secs(10), client.subscribe(filter))
        .await
        .expect("subscribe waited for an acknowledgement the refusal ruled out");
    match r {
        Err(ClientError::MethodNotFound(m)) => assert_eq!(m, "subscriptions/listen"),
        other => panic!("expected the server's -32601, got {other:?}"),
    }
    // Any other error answer comes back as it is.
    let port = raw_modern_server(|v| {
        (
            StatusCode::BAD_REQUEST,
            "application/json",
            json!({"jsonrpc": "2.0", "id": v["id"],
                   "error": {"code": -32602, "message": "no such filter"}})
            .to_string(),
        )
    })
    .await;
    let client = patient_modern_client(port).await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        client.subscribe(toolyard::proto::SubscriptionFilter::default()),
    )
    .await
    .expect("subscribe waited past the error answer");
    match r {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32602);
            assert_eq!(e.message, "no such filter");
        }
        other => panic!("expected the server's -32602, got {other:?}"),
    }
}

/// An SSE event carrying one JSON-RPC message.
fn sse_event(message: Value) -> String {
    format!("data: {message}\n\n")
}

#[tokio::test]
async fn a_listen_stream_the_server_ends_ends_the_subscription_after_its_notifications() {
    // The stream: the acknowledgement, one change, then the listen request's own answer.
    let port = raw_modern_server(|v| {
        let body = [
            sse_event(json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {}})),
            sse_event(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}})),
            sse_event(json!({"jsonrpc": "2.0", "id": v["id"], "result": {}})),
        ]
        .concat();
        (StatusCode::OK, "text/event-stream", body)
    })
    .await;
    let client = patient_modern_client(port).await;
    let mut sub = client
        .subscribe(toolyard::proto::SubscriptionFilter {
            tools_list_changed: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        let mut seen = Vec::new();
        while let Some(n) = sub.next().await {
            seen.push(n.method);
        }
        seen
    })
    .await
    .expect("the subscription outlived its listen stream");
    assert!(
        seen.contains(&"notifications/tools/list_changed".to_owned()),
        "the change sent before the end is delivered: {seen:?}"
    );
    assert!(matches!(sub.ended(), Some(None)), "{:?}", sub.ended());
    assert!(
        sub.next().await.is_none(),
        "an ended subscription stays ended"
    );
    assert!(!client.is_closed(), "only the subscription ended");

    // A stream cut before any answer ends it too, with the transport's error.
    let port = raw_modern_server(|_| {
        let ack = sse_event(json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {}}));
        (StatusCode::OK, "text/event-stream", ack)
    })
    .await;
    let client = patient_modern_client(port).await;
    let mut sub = client
        .subscribe(toolyard::proto::SubscriptionFilter::default())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while sub.next().await.is_some() {}
    })
    .await
    .expect("the subscription outlived its broken stream");
    match sub.ended() {
        Some(Some(ClientError::Transport(TransportError::Io(m)))) => {
            assert!(m.contains("before the response"), "{m}")
        }
        other => panic!("expected the broken stream's error, got {other:?}"),
    }
}

/// A request whose `_meta` carries a trace context and baggage (its caller's, or what a
/// gateway passes on; no observer of the client's own) sends them as HTTP headers too, in
/// both generations; a caller's text that is no header value stays in `_meta` only.
#[tokio::test]
async fn a_requests_meta_trace_context_and_baggage_go_out_as_http_headers_too() {
    let server = toolyard_testkit::demo(ServerBuilder::new("trace-headers", "0"))
        .start()
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let record = seen.clone();
    let config = HttpConfig {
        security: Security::loopback(),
        ..HttpConfig::default()
    };
    let app =
        toolyard::http::router(server, config)
            .await
            .unwrap()
            .layer(axum::middleware::map_request(
                move |r: axum::extract::Request| {
                    let record = record.clone();
                    async move {
                        let header = |n: &str| {
                            r.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned()
                        };
                        if r.method() == axum::http::Method::POST {
                            let trace = (
                                header("traceparent"),
                                header("tracestate"),
                                header("baggage"),
                            );
                            record.lock().unwrap().push(trace);
                        }
                        r
                    }
                },
            ));
    let port = serve(app).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for protocol in [
        ProtocolChoice::Modern,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        seen.lock().unwrap().clear();
        let c = client(protocol)
            .connect(StreamableHttpTransport::new(format!(
                "http://127.0.0.1:{port}/mcp"
            )))
            .await
            .unwrap();
        let traced = RequestOptions::default()
            .meta("traceparent", tp)
            .meta("tracestate", "k=v")
            .meta("baggage", "tenant=acme");
        c.call_tool_with("echo", json!({"message": "a"}), &traced)
            .await
            .unwrap();
        let bad = RequestOptions::default()
            .meta("traceparent", tp)
            .meta("baggage", "tenant=acme\r\nInjected: yes");
        c.call_tool_with("echo", json!({"message": "b"}), &bad)
            .await
            .unwrap();
        c.close().await;
        let seen = seen.lock().unwrap().clone();
        let pair = |tp: &str, ts: &str, b: &str| (tp.to_owned(), ts.to_owned(), b.to_owned());
        assert!(
            seen.contains(&pair(tp, "k=v", "tenant=acme")),
            "{protocol:?}: {seen:?}"
        );
        assert!(seen.contains(&pair(tp, "", "")), "{protocol:?}: {seen:?}");
    }
}
