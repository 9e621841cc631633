//! `toolyard serve --http` as a subprocess, spoken to with raw HTTP/1.1: status codes of both
//! generations, bad input, and that live sessions, streams and in-flight calls return to
//! their baseline afterwards.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct HttpServer {
    child: Child,
    pub(crate) port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) use toolyard_testkit::free_port;

impl HttpServer {
    pub(crate) fn start(extra: &[&str]) -> HttpServer {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_toolyard"))
            .args(["serve", "--http", &addr])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn toolyard");
        let server = HttpServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(r) = server.request("GET", "/healthz", &[], None) {
                if r.status == 200 {
                    return server;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("server did not become healthy");
    }

    /// A handle for requests only (the process belongs to someone else).
    pub(crate) fn client(port: u16) -> HttpClient {
        HttpClient { port }
    }

    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<Resp> {
        HttpClient { port: self.port }.request(method, path, headers, body)
    }

    /// A POST of a JSON-RPC message with the usual headers plus `extra`.
    pub(crate) fn post(&self, body: &Value, extra: &[(&str, &str)]) -> Resp {
        HttpClient { port: self.port }.post(body, extra)
    }

    /// A legacy session of `version`: initialized (200, that version), `initialized` sent
    /// (202). Returns its id.
    pub(crate) fn legacy_session(&self, version: &str) -> String {
        let init = self.post(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":version,"capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
            &[],
        );
        assert_eq!(init.status, 200);
        assert_eq!(init.message()["result"]["protocolVersion"], version);
        let sid = init
            .header("mcp-session-id")
            .expect("session id")
            .to_owned();
        let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        let h = [
            ("Mcp-Session-Id", sid.as_str()),
            ("MCP-Protocol-Version", version),
        ];
        assert_eq!(self.post(&initialized, &h).status, 202);
        sid
    }

    pub(crate) fn ready(&self) -> Value {
        self.request("GET", "/readyz", &[], None).unwrap().json()
    }
}

/// Raw HTTP/1.1 requests to a port.
pub(crate) struct HttpClient {
    port: u16,
}

impl HttpClient {
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<Resp> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req.push_str(&format!("Host: 127.0.0.1:{}\r\n", self.port));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = body.unwrap_or_default();
        req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        s.write_all(req.as_bytes())?;
        s.write_all(body)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        Ok(Resp::parse(&raw))
    }

    /// A POST of a JSON-RPC message with the usual headers plus `extra`.
    pub(crate) fn post(&self, body: &Value, extra: &[(&str, &str)]) -> Resp {
        let mut h = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        h.extend_from_slice(extra);
        self.request("POST", "/mcp", &h, Some(body.to_string().as_bytes()))
            .unwrap()
    }
}

pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Resp {
    fn parse(raw: &[u8]) -> Resp {
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("no header end");
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut body = raw[split + 4..].to_vec();
        if headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
        {
            body = dechunk(&body);
        }
        Resp {
            status,
            headers,
            body,
        }
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The JSON messages of an SSE body.
    pub(crate) fn events(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    }

    /// The JSON-RPC message of the answer, whether JSON or SSE.
    pub(crate) fn message(&self) -> Value {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            self.events().pop().expect("an SSE event")
        } else {
            self.json()
        }
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}})
}

fn modern_headers(method: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ]
}

#[test]
fn modern_status_codes_follow_the_spec() {
    let s = HttpServer::start(&[]);
    // A tool call: JSON answer with resultType.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":meta(),"name":"echo","arguments":{"message":"hi"}}}),
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "echo")],
    );
    assert_eq!(r.status, 200);
    let m = r.message();
    assert_eq!(m["result"]["resultType"], "complete");
    assert_eq!(m["result"]["content"][0]["text"], "hi");
    // Unknown and removed methods: 404 + -32601.
    for method in ["no/such", "ping"] {
        let r = s.post(
            &json!({"jsonrpc":"2.0","id":2,"method":method,"params":{"_meta":meta()}}),
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", method),
            ],
        );
        assert_eq!(
            (r.status, r.json()["error"]["code"].as_i64()),
            (404, Some(-32601)),
            "{method}"
        );
    }
    // Unsupported version: 400 + -32022; missing _meta: 400 + -32602.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1999-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}),
        &[("MCP-Protocol-Version", "1999-01-01"), ("Mcp-Method", "tools/list")],
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32022))
    );
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}),
        &modern_headers("tools/list"),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32602))
    );
    // Header/body mismatch: 400 + -32020.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":meta()}}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "prompts/list"),
        ],
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"_meta":meta(),"name":"echo","arguments":{"message":"x"}}}),
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "add")],
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    // A notification: 202. GET and DELETE without a session: 405.
    let r = s.post(
        &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}),
        &[],
    );
    assert_eq!(r.status, 202);
    assert_eq!(
        s.request("GET", "/mcp", &[("Accept", "text/event-stream")], None)
            .unwrap()
            .status,
        405
    );
    assert_eq!(s.request("DELETE", "/mcp", &[], None).unwrap().status, 405);
}

#[test]
fn progress_streams_as_sse_and_ends_with_the_result() {
    let s = HttpServer::start(&[]);
    let mut m = meta();
    m["progressToken"] = json!("p1");
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":m,"name":"slow","arguments":{"steps":3,"delay_ms":20}}}),
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "slow")],
    );
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    let progress = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 3);
    assert_eq!(
        events.last().unwrap()["result"]["content"][0]["text"],
        "done after 3 steps"
    );
    // Modern: no log messages without a logLevel in _meta.
    assert!(!events
        .iter()
        .any(|e| e["method"] == "notifications/message"));
}

#[test]
fn legacy_sessions_are_issued_used_and_deleted() {
    let s = HttpServer::start(&[]);
    let init = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        &[],
    );
    assert_eq!(init.status, 200);
    let sid = init
        .header("mcp-session-id")
        .expect("session id")
        .to_owned();
    assert_eq!(init.message()["result"]["protocolVersion"], "2025-11-25");
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    assert_eq!(
        s.post(
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            &h
        )
        .status,
        202
    );
    let r = s.post(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"s"}}}), &h);
    assert_eq!(r.message()["result"]["content"][0]["text"], "s");
    assert_eq!(s.ready()["sessions"], 1);
    // A bad protocol-version header: 400.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":3,"method":"ping"}),
        &[
            ("Mcp-Session-Id", sid.as_str()),
            ("MCP-Protocol-Version", "1.0"),
        ],
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        s.request("DELETE", "/mcp", &[("Mcp-Session-Id", sid.as_str())], None)
            .unwrap()
            .status,
        200
    );
    let r = s.post(&json!({"jsonrpc":"2.0","id":4,"method":"ping"}), &h);
    assert_eq!(r.status, 404, "a deleted session is unknown");
    assert_eq!(s.ready()["sessions"], 0);
}

#[test]
fn bad_http_input_gets_the_right_status_and_nothing_leaks() {
    let s = HttpServer::start(&["--max-body-bytes", "2000", "--bearer-token", "s3cret"]);
    let auth = ("Authorization", "Bearer s3cret");
    let ok = [
        auth,
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":meta()}});
    assert_eq!(s.post(&list, &ok).status, 200);
    let baseline = s.ready();

    // No token, a wrong token: 401 with a challenge.
    let r = s.post(
        &list,
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ],
    );
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    assert_eq!(
        s.post(&list, &[("Authorization", "Bearer nope")]).status,
        401
    );
    // Over the body limit: 413.
    let big = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":meta(),"name":"echo","arguments":{"message":"x".repeat(5000)}}});
    assert_eq!(s.post(&big, &ok).status, 413);
    // Wrong content type: 415; unacceptable Accept: 406.
    let body = list.to_string();
    let r = s
        .request(
            "POST",
            "/mcp",
            &[
                auth,
                ("Content-Type", "text/plain"),
                ("Accept", "application/json"),
            ],
            Some(body.as_bytes()),
        )
        .unwrap();
    assert_eq!(r.status, 415);
    let r = s
        .request(
            "POST",
            "/mcp",
            &[
                auth,
                ("Content-Type", "application/json"),
                ("Accept", "text/html"),
            ],
            Some(body.as_bytes()),
        )
        .unwrap();
    assert_eq!(r.status, 406);
    // Invalid JSON: 400 + -32700.
    let r = s
        .request(
            "POST",
            "/mcp",
            &[auth, ("Content-Type", "application/json")],
            Some(b"{oops"),
        )
        .unwrap();
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32700))
    );
    // Unknown session: 404.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":3,"method":"ping"}),
        &[auth, ("Mcp-Session-Id", "deadbeef")],
    );
    assert_eq!(r.status, 404);
    // Evil Host and Origin: 403 (DNS-rebinding protection).
    let r = s
        .request(
            "POST",
            "/mcp",
            &[
                auth,
                ("Host", "evil.example.com"),
                ("Content-Type", "application/json"),
            ],
            Some(body.as_bytes()),
        )
        .unwrap();
    assert_eq!(r.status, 403);
    let r = s.post(&list, &[auth, ("Origin", "http://evil.example.com")]);
    assert_eq!(r.status, 403);

    // A client that disconnects mid-call: the call is cancelled and its stream released.
    let mut m = meta();
    m["progressToken"] = json!("p");
    let call = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"_meta":m,"name":"slow","arguments":{"steps":100,"delay_ms":50}}}).to_string();
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: slow\r\nContent-Length: {}\r\n\r\n{call}",
        call.len()
    );
    sock.write_all(req.as_bytes()).unwrap();
    let mut first = [0u8; 256];
    let _ = sock.read(&mut first).unwrap();
    assert!(
        s.ready()["inFlight"].as_u64().unwrap() >= 1,
        "the call is running"
    );
    drop(sock);
    // A task started and cancelled over HTTP.
    let caps = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}});
    let created = s
        .post(
            &json!({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"_meta":caps,"name":"slow_task","arguments":{"steps":100,"delay_ms":50}}}),
            &[auth, ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "slow_task")],
        )
        .message();
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    assert_eq!(s.ready()["tasks"], 1);
    let cancelled = s.post(
        &json!({"jsonrpc":"2.0","id":11,"method":"tasks/cancel","params":{"_meta":caps,"taskId":task_id}}),
        &[auth, ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tasks/cancel"), ("Mcp-Name", task_id.as_str())],
    );
    assert_eq!(
        cancelled.status,
        200,
        "{}",
        String::from_utf8_lossy(&cancelled.body)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = s.ready();
        if now["inFlight"] == baseline["inFlight"]
            && now["streams"] == baseline["streams"]
            && now["sessions"] == baseline["sessions"]
            && now["tasks"] == baseline["tasks"]
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counts did not return to {baseline}: {now}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.post(&list, &ok).status, 200, "still serving");
}

#[test]
fn the_old_http_sse_transport_announces_its_endpoint() {
    let s = HttpServer::start(&[]);
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sock.write_all(
        format!(
            "GET /sse HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: text/event-stream\r\n\r\n",
            s.port
        )
        .as_bytes(),
    )
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = String::new();
    while !got.contains("sessionId=") {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "stream closed early: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.contains("event: endpoint"), "{got}");
    let path = got
        .lines()
        .find_map(|l| l.strip_prefix("data: /messages"))
        .map(|rest| format!("/messages{}", rest.trim()))
        .unwrap();
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let r = s
        .request(
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            Some(init.to_string().as_bytes()),
        )
        .unwrap();
    assert_eq!(r.status, 202);
    let mut answer = String::new();
    while !answer.contains("protocolVersion") {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0);
        answer.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(answer.contains("\"2024-11-05\""), "{answer}");
}

#[test]
fn sigterm_lets_in_flight_calls_finish_then_exits_zero() {
    let mut s = HttpServer::start(&["--drain-seconds", "5"]);
    let port = s.port;
    let call = std::thread::spawn(move || {
        let client = HttpServer::client(port);
        client.post(
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":meta(),"name":"slow","arguments":{"steps":6,"delay_ms":100}}}),
            &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "slow")],
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let r = call.join().unwrap();
    assert_eq!(
        r.message()["result"]["content"][0]["text"],
        "done after 6 steps"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(code) = s.child.try_wait().unwrap() {
            assert!(code.success(), "exit status {code}");
            break;
        }
        assert!(Instant::now() < deadline, "did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // New connections are refused once it stopped.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_legacy_stream_broken_mid_call_resumes_with_last_event_id() {
    let s = HttpServer::start(&[]);
    let init = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        &[],
    );
    let sid = init.header("mcp-session-id").unwrap().to_owned();
    let call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{"steps":5,"delay_ms":100},"_meta":{"progressToken":"p"}}}).to_string();
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{call}",
        call.len()
    );
    sock.write_all(req.as_bytes()).unwrap();
    // Read until the priming event and one progress event arrived, then break the stream.
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while !(got.contains("retry:") && got.contains("notifications/progress")) {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "stream ended early: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    drop(sock);
    let last_id = got
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(str::trim)
        .next_back()
        .unwrap()
        .to_owned();
    let r = s
        .request(
            "GET",
            "/mcp",
            &[
                ("Accept", "text/event-stream"),
                ("Mcp-Session-Id", &sid),
                ("Last-Event-ID", &last_id),
            ],
            None,
        )
        .unwrap();
    let events = r.events();
    let last = events.last().expect("events after resumption");
    assert_eq!(last["id"], 7);
    assert_eq!(
        last["result"]["content"][0]["text"], "done after 5 steps",
        "the call was not cancelled by the break"
    );
    assert!(
        !String::from_utf8_lossy(&r.body).contains(&format!("id: {last_id}\n")),
        "no event is replayed twice"
    );
}

#[test]
fn cors_preflight_and_responses_for_allowed_origins_only() {
    let s = HttpServer::start(&["--cors-origin", "https://app.example.com"]);
    let pre = s
        .request(
            "OPTIONS",
            "/mcp",
            &[
                ("Origin", "https://app.example.com"),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "mcp-param-region"),
            ],
            None,
        )
        .unwrap();
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert!(pre
        .header("access-control-allow-headers")
        .unwrap()
        .contains("mcp-session-id"));
    assert!(pre
        .header("access-control-allow-headers")
        .unwrap()
        .contains("mcp-param-region"));
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        &[("Origin", "https://app.example.com")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert!(r
        .header("access-control-expose-headers")
        .unwrap()
        .contains("mcp-session-id"));
    let evil = s.post(
        &json!({"jsonrpc":"2.0","id":2,"method":"ping"}),
        &[("Origin", "https://evil.example.com")],
    );
    assert_eq!(evil.status, 403);
    assert_eq!(evil.header("access-control-allow-origin"), None);
}

#[test]
fn oauth_flags_turn_the_binary_into_a_resource_server() {
    let jwks = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/runtime/tests/data/oauth-jwks.json"
    );
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["serve", "--http", &addr, "--oauth-resource", &resource])
        .args([
            "--oauth-issuer",
            "https://issuer.example",
            "--oauth-jwks",
            jwks,
        ])
        .args(["--oauth-tool-scope", "add=mcp:math"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = HttpServer { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while s
        .request("GET", "/healthz", &[], None)
        .map(|r| r.status)
        .unwrap_or(0)
        != 200
    {
        assert!(Instant::now() < deadline, "not healthy");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = s.post(&json!({"jsonrpc":"2.0","id":1,"method":"ping"}), &[]);
    assert_eq!(r.status, 401);
    let challenge = r.header("www-authenticate").unwrap().to_owned();
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    let prm = s
        .request(
            "GET",
            "/.well-known/oauth-protected-resource/mcp",
            &[],
            None,
        )
        .unwrap();
    assert_eq!(prm.status, 200);
    let doc = prm.json();
    assert_eq!(doc["resource"], resource);
    assert_eq!(doc["authorization_servers"][0], "https://issuer.example");
    assert_eq!(doc["scopes_supported"], json!(["mcp:math"]));
}

fn assert_params_must_be_an_object(r: &Resp, id: Value) {
    let m = r.message();
    assert_eq!(
        (r.status, m["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{m}"
    );
    assert_eq!(m["id"], id, "{m}");
    assert!(
        m["error"]["message"]
            .as_str()
            .is_some_and(|s| s.contains("must be an object")),
        "{m}"
    );
}

/// MCP has no positional params: in a legacy session a `tools/call` with
/// `"params": ["echo", {}]` was launched through the session's view and answered with a tool
/// result. It is refused at the edge (400 + -32602 addressed to its id), the session goes on,
/// and a positional `initialize` opens no session.
#[test]
fn positional_params_in_a_legacy_session_are_invalid_params_and_the_session_survives() {
    let s = HttpServer::start(&[]);
    let sid = s.legacy_session("2025-06-18");
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let echo = |id: i64| {
        let r = s.post(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"message":"still here"}}}), &h);
        assert_eq!(r.status, 200);
        assert_eq!(r.message()["result"]["content"][0]["text"], "still here");
    };
    echo(2);
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":["echo",{"message":"positional"}]}),
        &h,
    );
    assert_params_must_be_an_object(&r, json!(3));
    echo(4);
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":[]}),
        &h,
    );
    assert_params_must_be_an_object(&r, json!(5));
    echo(6);
    assert_eq!(s.ready()["sessions"], 1);
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":["2025-06-18",{},{"name":"t","version":"0"}]}),
        &[],
    );
    assert_params_must_be_an_object(&r, json!(7));
    assert!(r.header("mcp-session-id").is_none());
    assert_eq!(
        s.ready()["sessions"],
        1,
        "a positional initialize opened a session"
    );
}

/// A modern request with positional params has no `_meta`: it is refused as params that are
/// not an object (400 + -32602 saying so), before the header checks and not as a request
/// without a version; the next modern request is served.
#[test]
fn positional_params_in_a_modern_request_are_invalid_params() {
    let s = HttpServer::start(&[]);
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
    ];
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":["echo",{"message":"m"},{"_meta":meta()}]}),
        &headers,
    );
    assert_params_must_be_an_object(&r, json!(1));
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":meta(),"name":"echo","arguments":{"message":"after"}}}),
        &headers,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.message()["result"]["content"][0]["text"], "after");
}

/// HTTP+SSE (2024-11-05): a positional `tools/call` posted to `/messages` is refused (400),
/// its -32602 goes to the session's stream, and the session goes on.
#[test]
fn positional_params_over_http_sse_are_invalid_params_and_the_stream_survives() {
    let s = HttpServer::start(&[]);
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.write_all(
        format!(
            "GET /sse HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: text/event-stream\r\n\r\n",
            s.port
        )
        .as_bytes(),
    )
    .unwrap();
    let mut pending = String::new();
    let mut buf = vec![0u8; 4096];
    while !pending.contains("sessionId=") {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "stream closed early: {pending}");
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let path = pending
        .lines()
        .find_map(|l| l.strip_prefix("data: /messages"))
        .map(|rest| format!("/messages{}", rest.trim()))
        .unwrap();
    // The next JSON-RPC message on the stream answering `id`.
    let mut answer = |id: Value| -> Value {
        loop {
            if let Some(m) = pending
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m.get("id") == Some(&id) && m.get("method").is_none())
            {
                pending.clear();
                return m;
            }
            let n = sock.read(&mut buf).unwrap();
            assert!(n > 0, "stream closed early: {pending}");
            pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    let post = |body: Value| {
        s.request(
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        )
        .unwrap()
        .status
    };
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    assert_eq!(post(init), 202);
    assert_eq!(answer(json!(1))["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(
        post(json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
        202
    );
    let call = |id: i64| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"message":"still here"}}});
    assert_eq!(post(call(2)), 202);
    assert_eq!(
        answer(json!(2))["result"]["content"][0]["text"],
        "still here"
    );
    assert_eq!(
        post(
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":["echo",{"message":"positional"}]})
        ),
        400
    );
    let e = answer(json!(3));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("must be an object")),
        "{e}"
    );
    assert_eq!(post(call(4)), 202);
    assert_eq!(
        answer(json!(4))["result"]["content"][0]["text"],
        "still here"
    );
}

/// Mutated requests of every kind the demo serves (see the stdio test of the same name),
/// each POSTed on its own connection, in a legacy session and as modern stateless requests
/// whose `Mcp-Method` header names the method before the mutation (so mismatches are among
/// them), with cut-off and junk bodies: every POST is answered (no hang), never with a 5xx,
/// a 200 carries the JSON-RPC answer to the request it was for, and afterwards the server
/// is back to its baseline (no stream, session or call left in flight) and still serves.
#[test]
fn mutated_requests_over_streamable_http_are_each_answered_and_nothing_is_left_in_flight() {
    use crate::stdio::demo_requests;
    use toolyard_testkit::{mutate, Xorshift};
    let s = HttpServer::start(&[]);
    let sid = s.legacy_session("2025-11-25");
    let legacy = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let baseline = s.ready();
    let mut answered = 0;
    for (seed, modern) in [(11u64, false), (12, true)] {
        let with_meta = |params: Value| -> Value {
            let mut params = params;
            if modern {
                params["_meta"] = meta();
            }
            params
        };
        let requests = demo_requests(&with_meta, "");
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15 ^ seed);
        for n in 0..400i64 {
            let (method, params) = &requests[rng.below(requests.len())];
            let id = 1_000_000 + n;
            let message = mutate(
                &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
                &mut rng,
            );
            let mut body = message.to_string().into_bytes();
            match rng.below(100) {
                0..=2 => body.truncate(rng.below(body.len() + 1)),
                3..=4 => {
                    body = (0..1 + rng.below(40)).map(|_| rng.bits() as u8).collect();
                }
                _ => {}
            }
            let mut headers = vec![
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ];
            if modern {
                headers.extend([
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", *method),
                ]);
            } else {
                headers.extend(legacy);
            }
            let r = s
                .request("POST", "/mcp", &headers, Some(&body))
                .unwrap_or_else(|e| panic!("seed {seed}: no answer to {message}: {e}"));
            assert!(
                r.status < 500,
                "seed {seed}: {} for {message}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
            if r.status == 200 && message.get("id") == Some(&json!(id)) {
                let answer = r.message();
                assert_eq!(
                    answer["id"],
                    json!(id),
                    "seed {seed}: {message} -> {answer}"
                );
                answered += 1;
            }
        }
    }
    eprintln!("{answered} requests answered with 200");
    // The run exercised answers, not only refusals.
    assert!(answered > 300, "{answered} requests answered with 200");
    let mut after = s.ready();
    // The demo's `logging/setLevel` and subscriptions are session state, not in-flight work.
    for _ in 0..50 {
        if after == baseline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        after = s.ready();
    }
    assert_eq!(after, baseline, "the server is back to its baseline");
    let r = s.post(&json!({"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"echo","arguments":{"message":"still here"}}}), &legacy);
    assert_eq!(r.message()["result"]["content"][0]["text"], "still here");
}

/// `--http 127.0.0.1:0` lets the kernel pick a port: the "serving" line names that port (it
/// named `:0`), and the server answers there.
#[test]
fn serving_on_port_zero_names_the_port_it_picked() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .env_remove("TOOLYARD_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _server = HttpServer { child, port: 0 };
    let line = std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("serving MCP on"))
        .expect("a serving line");
    let port: u16 = line
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.strip_suffix("/mcp"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    assert_ne!(port, 0, "{line}");
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A port already in use is an error naming it, with no "serving" line before it (the line
/// came first, then the bind failed).
#[test]
fn a_port_in_use_is_an_error_without_a_serving_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["serve", "--http", &addr])
        .env_remove("TOOLYARD_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(&format!("cannot listen on {addr}")), "{said}");
    assert!(!said.contains("serving MCP on"), "{said}");
}
