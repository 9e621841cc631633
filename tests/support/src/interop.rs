//! Runs the official SDK client scripts of `tests/interop/` against a server over stdio or
//! HTTP, and starts HTTP servers on free ports.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/install-test-deps` put the SDKs.
pub fn cache() -> PathBuf {
    std::env::var_os("TOOLYARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/toolyard"))
}

/// The repository root: the first ancestor of the crate that holds `tests/interop`.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("tests/interop/python_client.py").exists())
        .expect("the repository's tests/interop folder")
        .to_path_buf()
}

/// How a client script reaches the server.
pub enum Target<'a> {
    /// It spawns this command and speaks stdio.
    Stdio(&'a [&'a str]),
    /// It connects to this URL over `http` (Streamable HTTP) or `sse` (HTTP+SSE).
    Url {
        /// The server's MCP endpoint.
        url: &'a str,
        /// `http` or `sse`.
        transport: &'a str,
    },
}

/// Runs one client script and asserts every check of its report passed (at least 10).
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub fn run_client(script: &str, profile: &str, protocol: &str, target: Target<'_>) {
    let interpreter = if script.ends_with(".py") {
        cache().join("venv/bin/python")
    } else {
        PathBuf::from("node")
    };
    assert!(
        !script.ends_with(".py") || interpreter.exists(),
        "the Python SDK is not installed: run scripts/install-test-deps (or scripts/test)"
    );
    let mut cmd = Command::new(&interpreter);
    cmd.arg(repo().join("tests/interop").join(script))
        .args([
            "--profile",
            profile,
            "--protocol",
            protocol,
            "--deadline",
            "60",
        ])
        .env("TOOLYARD_CACHE", cache());
    let how = match target {
        Target::Stdio(server) => {
            cmd.arg("--").args(server);
            "stdio".to_owned()
        }
        Target::Url { url, transport } => {
            cmd.args(["--transport", transport, "--url", url]);
            transport.to_owned()
        }
    };
    let out = cmd
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
        "{script} --protocol {protocol} over {how}: failed checks {failed:#?}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checks = report["checks"].as_array().map(Vec::len).unwrap_or(0);
    assert!(checks >= 10, "{script} ran only {checks} checks: {report}");
}

/// A server process on a free loopback port; killed (and reaped) when dropped, so a
/// failing assertion never leaves it behind.
pub struct ServerProcess {
    child: Child,
    port: u16,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    /// Starts `bin args... --http 127.0.0.1:PORT` and waits until `GET /healthz` answers 200.
    pub fn start(bin: &str, args: &[&str]) -> ServerProcess {
        let mut last = String::new();
        // The port is free when we look, but another process may take it before the
        // server binds: then the server exits at once, and we try another port.
        for _ in 0..3 {
            let port = crate::free_port();
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
            let mut server = ServerProcess { child, port };
            // A bound on waiting, not on speed: a gateway discovers its sources (`npx`,
            // `uvx` start-ups) before it serves, which on a loaded 2-core box took over 10 s.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = server.child.try_wait().expect("poll the server") {
                    last = format!("{bin} exited with {status} before /healthz answered");
                    break;
                }
                if healthz(port) == Some(200) {
                    return server;
                }
                if Instant::now() > deadline {
                    panic!("{bin} on port {port}: GET /healthz did not answer 200 within 60 s");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("{last}");
    }

    /// The server process's id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:PORT` (no path).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The MCP endpoint, `{base_url}/mcp`.
    pub fn url(&self) -> String {
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
