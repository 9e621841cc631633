//! The `toolyard` binary over stdio, as a subprocess: bad input, both generations.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use toolyard_testkit::{mutate, Xorshift};

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

/// Thousands of requests of every kind the demo serves, mutated at random (members dropped
/// or given values of the wrong type at any depth, ids and methods replaced, `_meta` made
/// odd), with cut-off lines, binary junk and batches among them, in a legacy session and
/// as modern stateless requests: every request that has an id and a method is answered
/// exactly once, nothing else is answered with one of those ids, and the server still
/// serves a call at the end. No panic, no hang, no lost request.
#[test]
fn mutated_requests_of_every_kind_are_each_answered_once_and_the_server_stays_up() {
    for (seed, modern) in [(1u64, false), (2, false), (3, true), (4, true)] {
        let p = Proc::spawn(&["serve", "--stdio"]);
        answers_every_mutated_request_once(p, seed, modern, "");
    }
}

/// The same through the gateway, whose forwarding path passes a call's arguments on as the
/// raw text they came in: mutated calls, reads and prompts of a stdio source are each
/// answered once (by the source or by the gateway) and both processes keep serving.
#[test]
fn mutated_requests_through_a_gateway_are_each_answered_once_and_it_stays_up() {
    let dir = std::env::temp_dir().join(format!("toolyard-mutate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gw.toml");
    std::fs::write(
        &config,
        format!(
            "[[sources]]\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--stdio\"]\n",
            env!("CARGO_BIN_EXE_toolyard")
        ),
    )
    .unwrap();
    for (seed, modern) in [(5u64, false), (6, true)] {
        let p = Proc::spawn(&["serve", "--stdio", "--config", config.to_str().unwrap()]);
        answers_every_mutated_request_once(p, seed, modern, "up__");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A request of each kind the demo set serves (`prefix` before its tool and prompt names),
/// each with its method, `with_meta` applied to its params.
pub(crate) fn demo_requests(
    with_meta: &dyn Fn(Value) -> Value,
    prefix: &str,
) -> Vec<(&'static str, Value)> {
    let (echo, add, greet) = (
        format!("{prefix}echo"),
        format!("{prefix}add"),
        format!("{prefix}greet"),
    );
    vec![
        (
            "tools/call",
            with_meta(json!({"name":echo,"arguments":{"message":"hi"}})),
        ),
        (
            "tools/call",
            with_meta(json!({"name":add,"arguments":{"a":1,"b":2}})),
        ),
        ("tools/list", with_meta(json!({}))),
        ("resources/list", with_meta(json!({}))),
        ("resources/templates/list", with_meta(json!({}))),
        ("resources/read", with_meta(json!({"uri":"demo://readme"}))),
        ("prompts/list", with_meta(json!({}))),
        (
            "prompts/get",
            with_meta(json!({"name":greet,"arguments":{"name":"x"}})),
        ),
        (
            "completion/complete",
            with_meta(
                json!({"ref":{"type":"ref/prompt","name":greet},"argument":{"name":"name","value":"a"}}),
            ),
        ),
        ("logging/setLevel", with_meta(json!({"level":"warning"}))),
        ("ping", with_meta(json!({}))),
        ("tasks/get", with_meta(json!({"taskId":"none"}))),
        ("server/discover", with_meta(json!({}))),
    ]
}

/// Sends 15 rounds of 100 mutated requests (`prefix` before the demo's tool and prompt
/// names), checks each round's answers, then one clean call.
fn answers_every_mutated_request_once(mut p: Proc, seed: u64, modern: bool, prefix: &str) {
    let modern_meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"it","version":"0"}});
    if !modern {
        p.initialize();
    }
    let with_meta = |params: Value| -> Value {
        let mut params = params;
        if modern {
            params["_meta"] = modern_meta.clone();
        }
        params
    };
    let echo = format!("{prefix}echo");
    let requests = demo_requests(&with_meta, prefix);
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15 ^ seed);
    let mut next_id = 1_000_000i64;
    // How many answers each id sent may still get: one for a request, two for a batch
    // that repeats it, one for a message cut short that may have stayed whole.
    let mut allowed = std::collections::HashMap::new();
    let mut answered_tracked = 0;
    for _round in 0..15 {
        // The requests of this round that must be answered before the next one.
        let mut expected = std::collections::HashSet::new();
        for _ in 0..100 {
            let (method, params) = &requests[rng.below(requests.len())];
            let id = next_id;
            next_id += 1;
            let message = mutate(
                &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
                &mut rng,
            );
            let mut text = message.to_string().into_bytes();
            let tracked = message.get("id") == Some(&json!(id))
                && message.get("method").is_some_and(Value::is_string);
            allowed.insert(id, 1);
            match rng.below(100) {
                // Cut off mid-message.
                0..=2 => text.truncate(rng.below(text.len() + 1)),
                // Junk bytes, no line break among them.
                3..=4 => {
                    text = (0..1 + rng.below(40))
                        .map(|_| (rng.bits() as u8).max(1))
                        .map(|b| if b == b'\n' { b' ' } else { b })
                        .collect();
                }
                // A batch of two.
                5 => {
                    let one = String::from_utf8(text.clone()).unwrap();
                    text = format!("[{one},{one}]").into_bytes();
                    allowed.insert(id, 2);
                }
                _ if tracked => {
                    expected.insert(id);
                }
                _ => {}
            }
            p.send_raw(&text);
        }
        while !expected.is_empty() {
            let m = p.recv();
            let Some(id) = m.get("id").and_then(Value::as_i64) else {
                continue;
            };
            if m.get("method").is_some() || id < 1_000_000 {
                continue;
            }
            let left = allowed.get_mut(&id).filter(|n| **n > 0);
            let left = left.unwrap_or_else(|| {
                panic!("seed {seed}: request {id} answered more than once, or never sent: {m}")
            });
            *left -= 1;
            if expected.remove(&id) {
                answered_tracked += 1;
            }
        }
    }
    // Most mutations leave a request with its id and method: the test checked their
    // answers, not only that the process lived.
    assert!(
        answered_tracked > 900,
        "seed {seed}: {answered_tracked} requests tracked"
    );
    eprintln!("seed {seed}: {answered_tracked} of 1500 requests tracked and answered once");
    // Still serving.
    let mut params = json!({"name":echo,"arguments":{"message":"still here"}});
    if modern {
        params["_meta"] = modern_meta.clone();
    }
    p.send(json!({"jsonrpc":"2.0","id":"last","method":"tools/call","params":params}));
    let r = p.answer(json!("last"));
    assert_eq!(
        r["result"]["content"][0]["text"], "still here",
        "seed {seed}: {r}"
    );
    assert!(p.close_and_wait().success(), "seed {seed}");
}
