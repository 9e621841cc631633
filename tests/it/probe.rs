//! `toolyard probe URL`, the container healthcheck of an image with no shell or curl: exit 0
//! only on a 2xx answer, and a failure that says why (the status and the `/readyz` body, a
//! refused connection, a server that never answers) within the timeout.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

fn probe(url: &str, timeout_ms: u64) -> Output {
    Command::new(BIN)
        .args(["probe", "--timeout-ms", &timeout_ms.to_string(), url])
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run toolyard probe")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Probes `url` until it exits 0, up to 10 s (the process it asks is starting).
fn wait_until_it_passes(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = probe(url, 1000);
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "probe {url} never passed: {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_probe_of_a_ready_server_exits_zero_and_prints_the_body() {
    let server = toolyard_testkit::ServerProcess::start(BIN, &["serve"]);
    let readyz = format!("{}/readyz", server.base_url());
    let out = probe(&readyz, 2000);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the /readyz JSON ({e}): {}",
            text(&out.stdout)
        )
    });
    assert_eq!(body["status"], "ready", "{body}");

    let missing = probe(&format!("{}/no-such-path", server.base_url()), 2000);
    assert_eq!(missing.status.code(), Some(1));
    let why = text(&missing.stderr);
    assert!(why.contains("404"), "a 404 is not named: {why}");
}

/// A worker waiting for its NATS server is alive but not ready: compose's healthcheck of a
/// worker (`probe http://127.0.0.1:8081/readyz`) fails, naming what is down.
#[cfg(feature = "nats")]
#[test]
fn a_probe_of_a_worker_without_its_broker_fails_naming_the_bus() {
    let closed = toolyard_testkit::ClosedPort::new();
    let health = format!("127.0.0.1:{}", toolyard_testkit::free_port());
    let nats = format!("nats://127.0.0.1:{}", closed.port());
    let worker = Command::new(BIN)
        .args(["worker", "--nats", &nats, "--name", "probed", "--no-demo"])
        .args(["--health", &health])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn toolyard worker");
    let _worker = Killed(worker);
    wait_until_it_passes(&format!("http://{health}/healthz"));

    let out = probe(&format!("http://{health}/readyz"), 2000);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let why = text(&out.stderr);
    assert!(
        why.contains("503") && why.contains("\"bus\"") && why.contains("not-ready"),
        "the failure does not name the status and the bus: {why}"
    );
    assert!(
        why.lines().count() == 1,
        "the failure is not one line: {why}"
    );
}

#[test]
fn a_probe_of_a_closed_port_or_a_silent_server_fails_within_its_timeout() {
    let closed = toolyard_testkit::ClosedPort::new();
    let url = format!("http://127.0.0.1:{}/readyz", closed.port());
    let out = probe(&url, 2000);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&url),
        "the URL is not named: {}",
        text(&out.stderr)
    );

    // Accepts the connection and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/readyz", silent.local_addr().expect("addr"));
    let started = Instant::now();
    let out = probe(&url, 300);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("timed out"),
        "the timeout is not named: {}",
        text(&out.stderr)
    );
    assert!(
        took < Duration::from_secs(5),
        "a 300 ms probe of a silent server took {took:?}"
    );
}
