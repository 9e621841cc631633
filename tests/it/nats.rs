//! The NATS bridge through the binary: `toolyard worker` processes on a real nats-server
//! (installed by scripts/install-test-deps), `toolyard serve --nats` in front of them, and a
//! plain NATS client that is not ours (nats-py, tests/interop/nats_client.py) calling a
//! worker by following docs/nats.md alone.

use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolyard_testkit::{cache, repo, NatsServer};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

/// A `toolyard worker` process, killed when dropped.
struct WorkerProcess(Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(url: &str, name: &str) -> WorkerProcess {
    WorkerProcess(
        Command::new(BIN)
            .args(["worker", "--nats", url, "--name", name])
            .env_remove("TOOLYARD_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start toolyard worker"),
    )
}

/// `toolyard client --stdio "toolyard serve --stdio --nats URL" ARGS...`, retried until the
/// gateway sees the worker (it starts in parallel), as JSON.
fn through_gateway(url: &str, args: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    let serve = format!("'{BIN}' serve --stdio --nats {url}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(BIN)
            .args(["client", "--stdio", &serve])
            .args(args)
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run toolyard client");
        let value: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if done(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "never got the expected answer: {value}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_worker_process_serves_its_tools_through_serve_nats() {
    let nats = NatsServer::start();
    let _w = worker(&nats.url(), "calc");
    let tools = through_gateway(&nats.url(), &["tools"], |v| {
        v["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "calc__echo"))
    });
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"].as_str().unwrap().starts_with("calc__")),
        "the NATS gateway serves the workers' tools, not the demo set: {tools}"
    );
    let echoed = through_gateway(
        &nats.url(),
        &[
            "call",
            "calc__echo",
            "--args",
            r#"{"message":"via the binary"}"#,
        ],
        |v| v["content"][0]["text"] == "via the binary",
    );
    assert_eq!(echoed["content"][0]["text"], "via the binary");
}

#[test]
fn a_plain_nats_client_calls_a_worker_by_the_documented_wire() {
    let nats = NatsServer::start();
    let _w = worker(&nats.url(), "calc");
    let python = cache().join("venv/bin/python");
    let script = repo().join("tests/interop/nats_client.py");
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let out = Command::new(&python)
            .arg(&script)
            .args([
                &nats.url(),
                "calc",
                "add",
                &json!({"a": 2, "b": 3}).to_string(),
            ])
            .output()
            .expect("run nats_client.py (scripts/install-test-deps installs nats-py)");
        if out.status.success() {
            break serde_json::from_slice::<Value>(&out.stdout).unwrap();
        }
        // The worker may not be subscribed yet: no responders.
        assert!(
            Instant::now() < deadline,
            "nats_client.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let frames = answer["frames"].as_array().unwrap();
    let last = frames.last().unwrap();
    assert_eq!(last["frame"], "end", "{answer}");
    assert_eq!(last["body"]["id"], "py-1", "{answer}");
    let text = last["body"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains('5'), "2 + 3: {answer}");
    // Frames are numbered from 0 without gaps.
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["seq"], i, "{answer}");
    }
}
