//! The `toolyard` binary over stdio, as a subprocess: bad input, both generations.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub(crate) struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    pub(crate) fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolyard"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn toolyard");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Proc {
            child,
            stdin,
            lines: rx,
        }
    }

    pub(crate) fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub(crate) fn send(&mut self, v: Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    pub(crate) fn recv(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("no answer from the server within 10 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {line}"))
    }

    /// The next message answering `id` (skipping notifications).
    pub(crate) fn answer(&mut self, id: Value) -> Value {
        loop {
            let m = self.recv();
            if m.get("id") == Some(&id) && m.get("method").is_none() {
                return m;
            }
        }
    }

    pub(crate) fn initialize(&mut self) {
        self.send(json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}));
        let r = self.answer(json!("init"));
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
        self.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }

    pub(crate) fn close_and_wait(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        for _ in 0..100 {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill().ok();
        panic!("the server did not exit within 5 s of stdin closing");
    }
}

fn code(m: &Value) -> i64 {
    m["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error, got {m}"))
}

fn echo(p: &mut Proc, id: i64) {
    p.send(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"message":"still here"}}}));
    let r = p.answer(json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "still here", "{r}");
}

#[test]
fn bad_input_gets_the_right_errors_and_the_connection_survives() {
    let mut p = Proc::spawn(&["serve", "--stdio", "--max-message-bytes", "4096"]);

    // Before initialize: a legacy request is refused, ping is allowed.
    p.send(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    assert_eq!(code(&p.answer(json!(1))), -32602);
    p.send(json!({"jsonrpc":"2.0","id":2,"method":"ping"}));
    assert_eq!(p.answer(json!(2))["result"], json!({}));
    // A modern request without _meta (server/discover only exists in 2026-07-28).
    p.send(json!({"jsonrpc":"2.0","id":3,"method":"server/discover"}));
    assert_eq!(code(&p.answer(json!(3))), -32602);

    p.initialize();

    let cases: Vec<(&[u8], i64)> = vec![
        (b"{not json", -32700),
        (b"[]", -32600),
        (
            b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            -32600,
        ),
        (b"42", -32600),
        (b"\"text\"", -32600),
        (
            b"{\"jsonrpc\":\"1.0\",\"id\":9,\"method\":\"ping\"}",
            -32600,
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}",
            -32600,
        ),
    ];
    for (i, (input, want)) in cases.into_iter().enumerate() {
        p.send_raw(input);
        let m = p.recv();
        assert_eq!(
            code(&m),
            want,
            "case {i}: {}",
            String::from_utf8_lossy(input)
        );
        echo(&mut p, 1000 + i as i64);
    }

    // Unknown method, wrong param types, unknown tool.
    p.send(json!({"jsonrpc":"2.0","id":10,"method":"no/such/method"}));
    assert_eq!(code(&p.answer(json!(10))), -32601);
    p.send(json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":42}}));
    assert_eq!(code(&p.answer(json!(11))), -32602);
    p.send(json!({"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":["x"]}}));
    assert_eq!(code(&p.answer(json!(12))), -32602);
    // A wrong argument type is a tool error naming the field (SEP-1303).
    p.send(json!({"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"echo","arguments":{"message":7}}}));
    let r = p.answer(json!(13));
    assert_eq!(r["result"]["isError"], true);
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("/message"),
        "{r}"
    );

    // Over the size limit: an error, then the next message is read normally.
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"message\":\"{}\"}}}}}}",
        "x".repeat(10_000)
    );
    p.send_raw(big.as_bytes());
    assert_eq!(code(&p.recv()), -32600);
    echo(&mut p, 15);

    // 10,000-deep nesting.
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":16,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{}{}}}}}",
        "[".repeat(1_500),
        "]".repeat(1_500)
    );
    p.send_raw(deep.as_bytes());
    assert_eq!(code(&p.recv()), -32700);
    echo(&mut p, 17);

    // Modern requests on the same connection: no clientCapabilities, a bad version,
    // a removed method.
    p.send(json!({"jsonrpc":"2.0","id":18,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}));
    assert_eq!(code(&p.answer(json!(18))), -32602);
    p.send(json!({"jsonrpc":"2.0","id":19,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}));
    let e = p.answer(json!(19));
    assert_eq!(code(&e), -32022);
    assert_eq!(e["error"]["data"]["requested"], "1900-01-01");
    p.send(json!({"jsonrpc":"2.0","id":20,"method":"logging/setLevel","params":{"level":"info","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}));
    assert_eq!(code(&p.answer(json!(20))), -32601);

    echo(&mut p, 21);
    assert!(p.close_and_wait().success());
}

#[test]
fn modern_requests_are_served_statelessly_without_initialize() {
    let mut p = Proc::spawn(&["serve", "--stdio"]);
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"it","version":"0"}});
    p.send(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta}}));
    let d = p.answer(json!(1));
    assert_eq!(d["result"]["resultType"], "complete");
    assert!(d["result"]["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));
    p.send(json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":meta}}));
    let l = p.answer(json!(2));
    assert_eq!(l["result"]["resultType"], "complete");
    assert!(
        l["result"]["ttlMs"].is_u64() && l["result"]["cacheScope"].is_string(),
        "{l}"
    );
    p.send(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":meta,"name":"echo","arguments":{"message":"m"}}}));
    let c = p.answer(json!(3));
    assert_eq!(c["result"]["resultType"], "complete");
    assert_eq!(c["result"]["content"][0]["text"], "m");
    assert!(p.close_and_wait().success());
}

/// `serve --stdio` runs on one thread unless `--workers` asks for more; on one, on two and
/// on four, a pipeline of calls sent without waiting is answered in full, each answer once
/// and as its call asked, while a slow call runs beside them.
#[test]
fn pipelined_calls_are_all_answered_on_one_thread_or_several() {
    for workers in [None, Some("2"), Some("4")] {
        let mut args = vec!["serve", "--stdio"];
        args.extend(workers.iter().flat_map(|w| ["--workers", *w]));
        let mut p = Proc::spawn(&args);
        p.initialize();
        p.send(json!({"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"slow","arguments":{"steps":2,"delay_ms":100}}}));
        for i in 0..200 {
            p.send(json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"echo","arguments":{"message":format!("m{i}")}}}));
        }
        let mut seen = std::collections::BTreeMap::new();
        let mut slow = None;
        while seen.len() < 200 || slow.is_none() {
            let m = p.recv();
            if m.get("method").is_some() {
                continue;
            }
            if m["id"] == "slow" {
                slow = Some(m);
                continue;
            }
            let id = m["id"]
                .as_i64()
                .unwrap_or_else(|| panic!("--workers {workers:?}: {m}"));
            let text = m["result"]["content"][0]["text"].clone();
            assert_eq!(text, json!(format!("m{id}")), "--workers {workers:?}: {m}");
            assert!(
                seen.insert(id, ()).is_none(),
                "--workers {workers:?}: {id} answered twice"
            );
        }
        let slow = slow.unwrap_or_default();
        assert!(slow["result"].is_object(), "--workers {workers:?}: {slow}");
        assert!(p.close_and_wait().success(), "--workers {workers:?}");
    }
}

#[test]
fn closing_stdin_cancels_a_running_call_and_the_process_exits() {
    let mut p = Proc::spawn(&["serve", "--stdio"]);
    p.initialize();
    p.send(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"steps":1000,"delay_ms":100}}}));
    std::thread::sleep(Duration::from_millis(200));
    assert!(p.close_and_wait().success());
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--stdio",
        "--config",
        "--max-message-bytes",
        "--max-in-flight",
        "--state-secret",
        "TOOLYARD_CONFIG",
    ] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
    }
}

/// Regression: with stdin a pipe and stdout a file, stdin was switched to non-blocking mode
/// before the stdout check failed, and the blocking fallback then died with EAGAIN.
#[test]
fn stdin_pipe_with_stdout_to_a_file_is_served() {
    let path = std::env::temp_dir().join(format!("toolyard-stdout-{}.txt", std::process::id()));
    let out = std::fs::File::create(&path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["serve", "--stdio"])
        .stdin(Stdio::piped())
        .stdout(out)
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .unwrap();
    }
    assert!(child.wait().unwrap().success());
    let written = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(written.trim(), r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
}

/// Requests of an initialized session may skip the connection actor, but never overtake an
/// earlier message it has not handled: a `logging/setLevel` written in the same burst as the
/// calls after it applies to them (regression test for the direct launch over stdio).
#[test]
fn a_pipelined_set_level_applies_to_the_calls_right_after_it() {
    let mut p = Proc::spawn(&["serve", "--stdio"]);
    p.initialize();
    echo(&mut p, 1);
    for round in 0..20 {
        let base = 100 + round * 10;
        // Calls already launched directly, so the next ones would skip the mailbox if the
        // connection did not know a setLevel was still waiting in it.
        let burst = [
            json!({"jsonrpc":"2.0","id":base,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}}}),
            json!({"jsonrpc":"2.0","id":base + 1,"method":"logging/setLevel","params":{"level":"error"}}),
            json!({"jsonrpc":"2.0","id":base + 2,"method":"tools/call","params":{"name":"slow","arguments":{"steps":1,"delay_ms":1}}}),
            json!({"jsonrpc":"2.0","id":base + 3,"method":"tools/call","params":{"name":"slow","arguments":{"steps":1,"delay_ms":1}}}),
        ];
        let text: Vec<String> = burst.iter().map(Value::to_string).collect();
        p.send_raw(text.join("\n").as_bytes());
        let mut answered = 0;
        while answered < 4 {
            let m = p.recv();
            assert_ne!(
                m["method"], "notifications/message",
                "round {round}: a call after setLevel(error) logged at info: {m}"
            );
            if m.get("id").is_some() {
                assert!(m.get("error").is_none(), "{m}");
                answered += 1;
            }
        }
        p.send(json!({"jsonrpc":"2.0","id":base + 4,"method":"logging/setLevel","params":{"level":"info"}}));
        p.answer(json!(base + 4));
    }
    assert!(p.close_and_wait().success());
}

/// Modern requests over stdio are launched from the reader without the connection actor;
/// they must still be cancellable by id, refuse a duplicate id in flight, and whatever the
/// direct launch does not accept must still get the connection's exact errors (regression
/// test for the direct modern launch).
#[test]
fn modern_direct_launches_keep_cancellation_and_errors() {
    let mut p = Proc::spawn(&["serve", "--stdio"]);
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"it","version":"0"}});
    let slow = json!({"_meta":meta,"name":"slow","arguments":{"steps":1000,"delay_ms":50}});
    p.send(json!({"jsonrpc":"2.0","id":"s","method":"tools/call","params":slow}));
    // The same id again while the first is running: refused, the first goes on.
    p.send(json!({"jsonrpc":"2.0","id":"s","method":"tools/call","params":slow}));
    assert_eq!(code(&p.answer(json!("s"))), -32600);
    // Unsupported version, missing capabilities, bad params: the connection's errors.
    let mut old = meta.clone();
    old["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    p.send(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":old,"name":"echo","arguments":{"message":"m"}}}));
    let e = p.answer(json!(1));
    assert_eq!(code(&e), -32022);
    assert!(e["error"]["data"]["supported"].is_array(), "{e}");
    p.send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"message":"m"}}}));
    assert_eq!(code(&p.answer(json!(2))), -32602);
    p.send(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":meta,"name":7}}));
    assert_eq!(code(&p.answer(json!(3))), -32602);
    // The running call is cancelled by id: no answer comes for it, later calls are served.
    p.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s"}}));
    p.send(json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":meta,"name":"echo","arguments":{"message":"after"}}}));
    let r = p.answer(json!(4));
    assert_eq!(r["result"]["content"][0]["text"], "after", "{r}");
    std::thread::sleep(Duration::from_millis(300));
    // The id is free again once the cancelled call has ended.
    p.send(json!({"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"_meta":meta,"name":"echo","arguments":{"message":"again"}}}));
    let again = p.answer(json!("s"));
    assert_eq!(again["result"]["content"][0]["text"], "again", "{again}");
    assert!(p.close_and_wait().success());
}

fn assert_params_must_be_an_object(m: &Value) {
    assert_eq!(code(m), -32602, "{m}");
    assert!(
        m["error"]["message"]
            .as_str()
            .is_some_and(|s| s.contains("must be an object")),
        "{m}"
    );
}

/// MCP has no positional params: a legacy `tools/call` with `"params": ["echo", {}]` was
/// launched directly (no message queued for the connection actor after initialize) and
/// answered with a tool result, because serde's derived struct deserializers read a JSON
/// array by position. It is -32602 and the connection goes on.
#[test]
fn positional_params_in_a_legacy_session_are_invalid_params_and_the_connection_survives() {
    let mut p = Proc::spawn(&["serve", "--stdio"]);
    p.send(json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}));
    assert_eq!(
        p.answer(json!("init"))["result"]["protocolVersion"],
        "2025-06-18"
    );
    p.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    // Once this is answered nothing is queued for the actor: the next request is launched
    // directly from the reader.
    echo(&mut p, 1);
    p.send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":["echo",{"message":"positional"}]}));
    assert_params_must_be_an_object(&p.answer(json!(2)));
    echo(&mut p, 3);
    p.send(json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":[]}));
    assert_params_must_be_an_object(&p.answer(json!(4)));
    p.send(json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":"echo"}));
    assert_params_must_be_an_object(&p.answer(json!(5)));
    echo(&mut p, 6);
    assert!(p.close_and_wait().success());
}

/// A modern request with positional params has no `_meta` to tell its generation by; it is
/// refused as params that are not an object (-32602 saying so), not taken for a legacy
/// request before `initialize`, and the connection goes on.
#[test]
fn positional_params_in_a_modern_request_are_invalid_params_and_the_connection_survives() {
    let mut p = Proc::spawn(&["serve", "--stdio"]);
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"it","version":"0"}});
    let call = |id: i64, message: &str| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"_meta":meta,"name":"echo","arguments":{"message":message}}});
    p.send(call(1, "first"));
    assert_eq!(p.answer(json!(1))["result"]["content"][0]["text"], "first");
    p.send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":["echo",{"message":"m"},{"_meta":meta}]}));
    assert_params_must_be_an_object(&p.answer(json!(2)));
    p.send(call(3, "after"));
    let r = p.answer(json!(3));
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "after", "{r}");
    assert!(p.close_and_wait().success());
}
