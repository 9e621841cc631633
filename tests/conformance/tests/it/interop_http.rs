//! `conformance-server --http` against the official MCP SDK clients (Python `mcp`,
//! TypeScript v1 and v2), over Streamable HTTP (`/mcp`) in every generation each client
//! speaks there, and over the deprecated HTTP+SSE transport (`/sse` + `/messages`). The
//! clients and their checks (`--profile conformance`) live in `tests/interop/`;
//! `scripts/install-test-deps` installs them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn cache() -> PathBuf {
    std::env::var_os("TOOLYARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/toolyard"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A server process on a free loopback port; killed (and reaped) when dropped, so a
/// failing assertion never leaves it behind.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `bin args... --http 127.0.0.1:PORT` and waits until `GET /healthz` answers 200.
    fn start(bin: &str, args: &[&str]) -> Server {
        let mut last = String::new();
        // The port is free when we look, but another process may take it before the
        // server binds: then the server exits at once, and we try another port.
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("bind a free loopback port")
                .port();
            let mut cmd = Command::new(bin);
            cmd.args(args)
                .arg("--http")
                .arg(format!("127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            // Settings from the caller's environment (bearer tokens, config files...) must
            // not change what the clients meet.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("TOOLYARD_") && key != "TOOLYARD_CACHE" {
                    cmd.env_remove(key);
                }
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
            let mut server = Server { child, port };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(status) = server.child.try_wait().expect("poll the server") {
                    last = format!("{bin} exited with {status} before /healthz answered");
                    break;
                }
                if healthz(port) == Some(200) {
                    return server;
                }
                if Instant::now() > deadline {
                    panic!("{bin} on port {port}: GET /healthz did not answer 200 within 10 s");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("{last}");
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

/// The status code of `GET /healthz`, or `None` if nothing answers (yet).
fn healthz(port: u16) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).ok()?;
    let line = String::from_utf8_lossy(&head[..n]);
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs one client script against `url` over `transport` and asserts every check passed.
fn run_client(script: &str, profile: &str, protocol: &str, transport: &str, url: &str) {
    let interpreter = if script.ends_with(".py") {
        cache().join("venv/bin/python")
    } else {
        PathBuf::from("node")
    };
    assert!(
        !script.ends_with(".py") || interpreter.exists(),
        "the Python SDK is not installed: run scripts/install-test-deps (or scripts/test)"
    );
    let out = Command::new(&interpreter)
        .arg(repo().join("tests/interop").join(script))
        .args(["--profile", profile, "--protocol", protocol])
        .args(["--transport", transport, "--url", url])
        .args(["--deadline", "60"])
        .env("TOOLYARD_CACHE", cache())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {interpreter:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "{script} printed no report (exit {:?}); stderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let failed: Vec<_> = report["checks"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["ok"] != true).cloned().collect())
        .unwrap_or_default();
    assert!(
        out.status.success() && report["ok"] == true && failed.is_empty(),
        "{script} --protocol {protocol} --transport {transport}: failed checks {failed:#?}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checks = report["checks"].as_array().map(Vec::len).unwrap_or(0);
    assert!(checks >= 10, "{script} ran only {checks} checks: {report}");
}

/// One fresh `conformance-server --http` per test, the conformance profile.
fn conformance(script: &str, protocol: &str, transport: &str) {
    let server = Server::start(env!("CARGO_BIN_EXE_conformance-server"), &[]);
    run_client(script, "conformance", protocol, transport, &server.url());
}

#[test]
fn python_sdk_legacy_http() {
    conformance("python_client.py", "legacy", "http");
}

#[test]
fn python_sdk_modern_http() {
    conformance("python_client.py", "modern", "http");
}

#[test]
fn typescript_sdk_v1_legacy_http() {
    conformance("ts_v1_client.mjs", "legacy", "http");
}

#[test]
fn typescript_client_v2_legacy_http() {
    conformance("ts_v2_client.mjs", "legacy", "http");
}

#[test]
fn typescript_client_v2_modern_http() {
    conformance("ts_v2_client.mjs", "modern", "http");
}

#[test]
fn python_sdk_legacy_sse() {
    conformance("python_client.py", "legacy", "sse");
}

#[test]
fn typescript_sdk_v1_legacy_sse() {
    conformance("ts_v1_client.mjs", "legacy", "sse");
}
