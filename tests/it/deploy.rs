//! The topology of `deploy/compose/compose.yaml`, run for real without containers: a
//! nats-server with JetStream, an OTLP/HTTP receiver in place of the collector, one gateway
//! (`toolyard serve --http --nats --prometheus`) and a pool of three workers (`toolyard worker
//! --name calc`), each started with the command, the `TOOLYARD_*`/`OTEL_*` variables and the
//! `deploy/config` file compose gives it (the test checks compose.yaml still says so). Under a
//! steady load of calls through the gateway's HTTP endpoint, one worker is killed (SIGKILL) and
//! started again, then the three are restarted one by one (SIGTERM, drain, start again): the
//! only calls allowed to fail are those in flight on the killed worker, and those NATS routed
//! to a draining worker in the instant it left its queue group and that it never saw (a known
//! gap of async-nats 0.51 and 0.52, counted apart; rare: one in six runs of 24 callers). A draining worker
//! never refuses a call it was given.

use crate::http::free_port;
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use toolyard::client::{ClientBuilder, RequestOptions, StreamableHttpTransport};
use toolyard_testkit::{repo, NatsServer, OtlpReceiver, ReceivedSpan};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");
/// Any wait for a process or a condition; far above what each takes (well under a second).
const WAIT: Duration = Duration::from_secs(30);
/// A caller's deadline per call: a call in flight on a SIGKILLed worker gets no more frames
/// and ends here (the gateway's own inactivity deadline is 60 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Concurrent callers.
const CALLERS: usize = 16;
/// Calls completed between two steps of the scenario (the load keeps running throughout).
const CALLS_PER_STEP: usize = 100;
/// A killed process's connection is gone once it is reaped; nats-server notices the closed
/// socket a moment later. A call started this long after the reap is no longer "in flight
/// at the kill".
const KILL_SLACK: Duration = Duration::from_millis(500);
/// How long a call may take from its caller to a worker (through the gateway and NATS).
const TRANSIT_SLACK: Duration = Duration::from_millis(50);

/// compose.yaml's shared `x-toolyard-env`, with the compose value and the value here (the
/// host names become this test's ports).
fn common_env(nats: &str, otlp: &str) -> Vec<(&'static str, &'static str, String)> {
    vec![
        ("TOOLYARD_NATS", "nats://nats:4222", nats.to_owned()),
        ("TOOLYARD_LOG", "info", "info".to_owned()),
        ("TOOLYARD_DRAIN_SECONDS", "\"20\"", "20".to_owned()),
        (
            "TOOLYARD_STATE_SECRET",
            "${TOOLYARD_STATE_SECRET:-}",
            // Compose's default: empty, which is no secret (the processes share one on
            // the bus).
            String::new(),
        ),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://otel-collector:4318",
            otlp.to_owned(),
        ),
        (
            "OTEL_TRACES_SAMPLER",
            "parentbased_always_on",
            "parentbased_always_on".to_owned(),
        ),
    ]
}

/// What compose gives one service besides the shared variables.
struct Service {
    name: &'static str,
    /// The `command:` line as compose.yaml writes it.
    compose_command: &'static str,
    /// The same command here.
    args: Vec<String>,
    /// `(key, value in compose.yaml, value here)`.
    env: Vec<(&'static str, &'static str, String)>,
}

fn gateway_service(nats: &str, http: &str) -> Service {
    Service {
        name: "gateway",
        compose_command: r#"command: ["serve", "--http", "0.0.0.0:8080", "--nats", "nats://nats:4222", "--prometheus"]"#,
        args: ["serve", "--http", http, "--nats", nats, "--prometheus"]
            .map(str::to_owned)
            .to_vec(),
        env: vec![
            config_env("/etc/toolyard/gateway.toml", "gateway.toml"),
            (
                "OTEL_SERVICE_NAME",
                "toolyard-gateway",
                "toolyard-gateway".to_owned(),
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=compose,service.namespace=toolyard",
                "deployment.environment=compose,service.namespace=toolyard".to_owned(),
            ),
        ],
    }
}

fn worker_service(nats: &str) -> Service {
    Service {
        name: "worker",
        compose_command: r#"command: ["worker", "--nats", "nats://nats:4222", "--name", "calc"]"#,
        args: ["worker", "--nats", nats, "--name", "calc"]
            .map(str::to_owned)
            .to_vec(),
        env: vec![
            config_env("/etc/toolyard/worker.toml", "worker.toml"),
            ("TOOLYARD_CONCURRENCY", "\"64\"", "64".to_owned()),
            (
                "OTEL_SERVICE_NAME",
                "toolyard-worker-calc",
                "toolyard-worker-calc".to_owned(),
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=compose,service.namespace=toolyard,toolyard.worker.pool=calc",
                "deployment.environment=compose,service.namespace=toolyard,toolyard.worker.pool=calc"
                    .to_owned(),
            ),
        ],
    }
}

/// `TOOLYARD_CONFIG`: compose mounts `deploy/config/FILE` at `mounted`.
fn config_env(mounted: &'static str, file: &str) -> (&'static str, &'static str, String) {
    let path = repo().join("deploy/config").join(file);
    assert!(path.is_file(), "{} is missing", path.display());
    (
        "TOOLYARD_CONFIG",
        mounted,
        path.to_string_lossy().into_owned(),
    )
}

/// The compose file still starts the services as this test does: a drift between the two
/// fails here, not silently.
fn assert_compose_says(compose: &str, service: &Service, common: &[(&str, &str, String)]) {
    assert!(
        compose.contains(service.compose_command),
        "deploy/compose/compose.yaml no longer has `{}` for {}: update this test with it",
        service.compose_command,
        service.name
    );
    for (key, value, _) in common.iter().chain(&service.env) {
        let line = format!("{key}: {value}");
        assert!(
            compose.contains(&line),
            "deploy/compose/compose.yaml no longer sets `{line}` (for {}): update this test \
             with it",
            service.name
        );
    }
    if service.name == "worker" {
        assert!(
            compose.contains("../config/worker.toml:/etc/toolyard/worker.toml:ro")
                && compose.contains("replicas: 3"),
            "compose mounts deploy/config/worker.toml into a pool of 3 workers"
        );
        // The workers here run without TOOLYARD_HEALTH (three on one host cannot share its
        // port); in compose, the healthcheck asks the port TOOLYARD_HEALTH gives.
        assert!(
            compose.contains("TOOLYARD_HEALTH: 127.0.0.1:8081")
                && compose.contains(
                    r#"test: ["CMD", "/usr/local/bin/toolyard", "probe", "http://127.0.0.1:8081/readyz"]"#
                ),
            "compose's worker healthcheck probes the /readyz of the worker's TOOLYARD_HEALTH"
        );
    } else {
        assert!(compose.contains("../config/gateway.toml:/etc/toolyard/gateway.toml:ro"));
    }
}

/// A `toolyard` process of the topology; its stderr goes to the test's, each line prefixed with
/// its name. Killed (SIGKILL) when dropped.
struct Proc {
    name: String,
    child: Child,
    /// Gets `()` when the process printed its "serving on" line.
    serving: mpsc::Receiver<()>,
}

impl Proc {
    fn start(name: &str, service: &Service, common: &[(&str, &str, String)]) -> Proc {
        let mut cmd = Command::new(BIN);
        cmd.args(&service.args)
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, _, value) in common.iter().chain(&service.env) {
            cmd.env(key, value);
        }
        // Test-only: spans are batched for 100 ms instead of 5 s, metrics exported every second.
        cmd.env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "1000");
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        let stderr = child.stderr.take().unwrap();
        let (tx, serving) = mpsc::channel();
        let prefix = name.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("serving on") {
                    let _ = tx.send(());
                }
                eprintln!("[{prefix}] {line}");
            }
        });
        Proc {
            name: name.to_owned(),
            child,
            serving,
        }
    }

    /// Waits for the worker's "serving on" line (it is subscribed on the bus).
    fn wait_serving(&self) {
        match self.serving.recv_timeout(WAIT) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{} did not say \"serving on\" within {WAIT:?}", self.name)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{} exited before it served", self.name)
            }
        }
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, signal)
            .unwrap_or_else(|e| panic!("cannot send {signal} to {}: {e}", self.name));
    }

    /// Waits until the process exits, and returns how.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {WAIT:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits for the drain to end and the process to exit; asserts it exited 0.
    fn terminate(&mut self) -> Duration {
        let started = Instant::now();
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let status = self.wait_exit();
        assert!(
            status.success(),
            "{} exited with {status} after SIGTERM",
            self.name
        );
        started.elapsed()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call of the load.
#[derive(Debug)]
struct Call {
    caller: usize,
    tool: &'static str,
    /// The trace id the caller put in `_meta.traceparent`.
    trace_id: String,
    start: Instant,
    end: Instant,
    outcome: Outcome,
}

/// How a call ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Ok,
    /// An answer that is an error (a JSON-RPC error, or a result with `isError`).
    Refused(String),
    /// No answer within [`CALL_TIMEOUT`]: the call was lost.
    Silence,
}

#[derive(Default)]
struct Load {
    calls: Mutex<Vec<Call>>,
    done: AtomicUsize,
    stop: AtomicBool,
}

impl Load {
    /// Waits until `n` more calls have completed (the load is steady and going through).
    fn wait_for_calls(&self, n: usize, what: &str) {
        let target = self.done.load(Ordering::SeqCst) + n;
        let deadline = Instant::now() + WAIT;
        while self.done.load(Ordering::SeqCst) < target {
            assert!(
                Instant::now() < deadline,
                "{what}: {n} calls did not complete within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A caller: its own MCP session with the gateway over Streamable HTTP, alternating a quick
/// `calc__echo` and a 300 ms `calc__slow`, each with a trace context of its own in `_meta`.
async fn caller(id: usize, url: String, load: Arc<Load>) {
    let client = ClientBuilder::new(toolyard::proto::Implementation::new(
        format!("deploy-caller-{id}"),
        "1",
    ))
    .request_timeout(CALL_TIMEOUT)
    .connect(StreamableHttpTransport::new(url))
    .await
    .unwrap_or_else(|e| panic!("caller {id} cannot connect to the gateway: {e}"));
    let mut n: u64 = 0;
    while !load.stop.load(Ordering::SeqCst) {
        n += 1;
        let trace_id = format!("{:016x}{n:016x}", 0xdeb1_0000_u64 + id as u64);
        let mut meta = Map::new();
        meta.insert(
            "traceparent".into(),
            format!("00-{trace_id}-{:016x}-01", n + 1).into(),
        );
        let opts = RequestOptions {
            meta: Some(meta),
            ..RequestOptions::default()
        };
        let (tool, args) = if n % 2 == 1 {
            ("calc__echo", json!({"message": format!("{id}-{n}")}))
        } else {
            ("calc__slow", json!({"steps": 3, "delay_ms": 100}))
        };
        let start = Instant::now();
        let outcome = match client.call_tool_with(tool, args, &opts).await {
            Ok(result) if result.failed() => Outcome::Refused(format!("error result: {result:?}")),
            Ok(_) => Outcome::Ok,
            Err(toolyard::client::ClientError::Timeout { .. }) => Outcome::Silence,
            Err(e) => Outcome::Refused(e.to_string()),
        };
        let end = Instant::now();
        load.calls.lock().unwrap().push(Call {
            caller: id,
            tool,
            trace_id,
            start,
            end,
            outcome,
        });
        load.done.fetch_add(1, Ordering::SeqCst);
    }
    client.close().await;
}

/// Whether the gateway's `/readyz` says 200 `ready`.
async fn ready(base: &str) -> bool {
    match reqwest::get(format!("{base}/readyz")).await {
        Ok(r) if r.status() == 200 => r
            .bytes()
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["status"] == "ready"),
        _ => false,
    }
}

/// Waits until the gateway is ready and lists the pool's tools.
async fn wait_for_gateway(base: &str, url: &str) {
    let deadline = Instant::now() + WAIT;
    while !ready(base).await {
        assert!(Instant::now() < deadline, "{base}/readyz never said ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = ClientBuilder::new(toolyard::proto::Implementation::new("deploy-probe", "1"))
        .connect(StreamableHttpTransport::new(url.to_owned()))
        .await
        .unwrap();
    loop {
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .map(|t| t.into_iter().map(|t| t.name).collect())
            .unwrap_or_default();
        if ["calc__echo", "calc__slow", "calc__deployment"]
            .iter()
            .all(|n| names.iter().any(|m| m == n))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway never listed the calc pool's tools: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.close().await;
}

#[test]
fn the_compose_topology_under_load_fails_only_calls_in_flight_on_a_killed_or_draining_worker() {
    let began = Instant::now();
    let compose = std::fs::read_to_string(repo().join("deploy/compose/compose.yaml")).unwrap();
    let nats = NatsServer::start();
    let otlp = OtlpReceiver::start();
    let common = common_env(&nats.url(), &otlp.url());
    let http = format!("127.0.0.1:{}", free_port());
    let gateway = gateway_service(&nats.url(), &http);
    let worker = worker_service(&nats.url());
    assert_compose_says(&compose, &gateway, &common);
    assert_compose_says(&compose, &worker, &common);

    let mut workers: Vec<Proc> = (0..3)
        .map(|i| Proc::start(&format!("worker-{i}"), &worker, &common))
        .collect();
    for w in &workers {
        w.wait_serving();
    }
    let mut gw = Proc::start("gateway", &gateway, &common);
    let base = format!("http://{http}");
    let url = format!("{base}/mcp");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(wait_for_gateway(&base, &url));
    let setup = began.elapsed();

    // The load runs on the runtime's threads while this thread drives the scenario.
    let load = Arc::new(Load::default());
    let callers: Vec<_> = (0..CALLERS)
        .map(|id| runtime.spawn(caller(id, url.clone(), load.clone())))
        .collect();
    load.wait_for_calls(CALLS_PER_STEP, "steady load");

    // 1. One worker dies (SIGKILL) and is started again.
    let kill_sent = Instant::now();
    workers[1].signal(nix::sys::signal::Signal::SIGKILL);
    workers[1].wait_exit();
    let kill_reaped = Instant::now();
    workers[1] = Proc::start("worker-1 (after SIGKILL)", &worker, &common);
    workers[1].wait_serving();
    load.wait_for_calls(CALLS_PER_STEP, "after the SIGKILL");

    // 2. A rolling restart: each worker drains on SIGTERM, exits, and is started again.
    let restart_from = Instant::now();
    let mut drains = Vec::new();
    let mut terms = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        let term = Instant::now();
        drains.push(w.terminate());
        terms.push((term, Instant::now()));
        *w = Proc::start(&format!("worker-{i} (restarted)"), &worker, &common);
        w.wait_serving();
        load.wait_for_calls(CALLS_PER_STEP, "during the rolling restart");
    }
    let restart_to = Instant::now();
    load.wait_for_calls(CALLS_PER_STEP, "after the rolling restart");
    load.stop.store(true, Ordering::SeqCst);
    runtime.block_on(async {
        for c in callers {
            c.await.unwrap();
        }
    });

    // The gateway's Prometheus endpoint counted the calls it served.
    let metrics = runtime.block_on(async {
        let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
        String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap()
    });
    assert!(
        metrics.lines().any(
            |l| l.starts_with("mcp_server_operation_duration_seconds_count")
                && l.contains(r#"gen_ai_tool_name="calc__echo""#)
        ),
        "the gateway's /metrics has no calc__echo series:\n{metrics}"
    );

    // Every process drains and exits on SIGTERM, flushing its spans.
    for w in &mut workers {
        w.terminate();
    }
    gw.terminate();

    let calls = std::mem::take(&mut *load.calls.lock().unwrap());
    let spans = otlp.spans();
    let traces_with = |service: &str| -> std::collections::HashSet<String> {
        spans
            .iter()
            .filter(|s: &&ReceivedSpan| s.service == service && s.name.starts_with("tools/call"))
            .map(|s| s.trace_id.clone())
            .collect()
    };
    let gateway_traces = traces_with("toolyard-gateway");
    let worker_traces = traces_with("toolyard-worker-calc");

    let in_flight_at_kill: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start <= kill_reaped + KILL_SLACK && c.end >= kill_sent)
        .collect();
    // In flight on the killed worker: in flight at the kill, and no worker ever ended a span
    // of its trace (the surviving workers flushed all theirs on SIGTERM; the killed one lost
    // its unfinished ones).
    let on_killed: Vec<&Call> = in_flight_at_kill
        .iter()
        .copied()
        .filter(|c| !worker_traces.contains(&c.trace_id))
        .collect();
    let failed: Vec<&Call> = calls.iter().filter(|c| c.outcome != Outcome::Ok).collect();
    // Lost in a drain: sent while a worker was leaving its queue group (SIGTERM to exit) and
    // never answered. async-nats (0.51, 0.52) drops a drained subscription once the UNSUB is
    // written, not once the server has taken it, so a request the server routes to the
    // worker in between is dropped unseen: it was in flight on the stopped worker, and only
    // the caller's deadline ends it, or the gateway's -32010 when, 5 s after it sent the call,
    // nothing listens on the call's `{reply}.ctl` ("gone before it answered"), whichever
    // comes first.
    // A call its caller sent just before a SIGTERM reaches the worker just after it (caller ->
    // gateway -> NATS -> worker): `TRANSIT_SLACK` before the signal counts as in the window
    // (seen once in CI: a call started 1 ms before a SIGTERM was lost this way). A call lost in
    // a drain never reached a worker: no worker span of its trace.
    let lost_in_drain: Vec<&Call> = failed
        .iter()
        .copied()
        .filter(|c| {
            (c.outcome == Outcome::Silence
                || matches!(&c.outcome, Outcome::Refused(m) if m.contains("gone before it answered")))
                && !worker_traces.contains(&c.trace_id)
                && terms.iter().any(|(term, exited)| {
                    c.start + TRANSIT_SLACK >= *term && c.start <= *exited + KILL_SLACK
                })
        })
        .collect();
    let during_restart = calls
        .iter()
        .filter(|c| c.start < restart_to && c.end > restart_from)
        .count();
    // Calls in flight (on any worker) when each SIGTERM was sent.
    let in_flight_at_terms: Vec<usize> = terms
        .iter()
        .map(|(t, _)| {
            calls
                .iter()
                .filter(|c| c.start <= *t && c.end >= *t)
                .count()
        })
        .collect();
    let ok: Vec<&Call> = calls.iter().filter(|c| c.outcome == Outcome::Ok).collect();
    let ok_without_worker_span: Vec<&Call> = ok
        .iter()
        .copied()
        .filter(|c| !worker_traces.contains(&c.trace_id))
        .collect();

    eprintln!(
        "deploy topology: {} calls by {CALLERS} callers ({} echo, {} slow), {} failed; \
         {during_restart} during the rolling restart of 3 workers (in flight at each \
         SIGTERM: {in_flight_at_terms:?}, SIGTERM to exit: {drains:?}); \
         in flight at the SIGKILL: {} on all workers, {} on the killed one; setup {setup:?}, \
         whole test {:?}",
        calls.len(),
        calls.iter().filter(|c| c.tool == "calc__echo").count(),
        calls.iter().filter(|c| c.tool == "calc__slow").count(),
        failed.len(),
        in_flight_at_kill.len(),
        on_killed.len(),
        began.elapsed(),
    );
    for c in &failed {
        eprintln!(
            "deploy topology: failed: caller {} {} {}, {:+.3}s..{:+.3}s from the SIGKILL, \
             started {:+.3}s from the nearest SIGTERM: {:?}",
            c.caller,
            c.tool,
            c.trace_id,
            signed_secs(c.start, kill_sent),
            signed_secs(c.end, kill_sent),
            terms
                .iter()
                .map(|(t, _)| signed_secs(c.start, *t))
                .min_by(|a, b| a.abs().total_cmp(&b.abs()))
                .unwrap_or(f64::NAN),
            c.outcome
        );
    }
    eprintln!(
        "deploy topology: OTLP: {} spans; traces with a gateway span {}, with a worker span {} \
         (of {} successful calls; {} successful without a worker span)",
        spans.len(),
        gateway_traces.len(),
        worker_traces.len(),
        ok.len(),
        ok_without_worker_span.len(),
    );

    eprintln!(
        "deploy topology: failed calls: {} in flight on the SIGKILLed worker, {} lost while a \
         worker left its queue group on SIGTERM",
        failed.len() - lost_in_drain.len(),
        lost_in_drain.len()
    );
    for c in &failed {
        let on_a_stopped_worker = on_killed.iter().any(|k| std::ptr::eq(*k, *c))
            || lost_in_drain.iter().any(|k| std::ptr::eq(*k, *c));
        assert!(
            on_a_stopped_worker,
            "a call failed that was not in flight on a stopped worker (a draining worker must \
             answer what it was given, never refuse it): {c:?}"
        );
    }
    assert!(failed.len() - lost_in_drain.len() <= on_killed.len());
    // Traced: every call has the gateway's span, and every successful one a worker's, but
    // those the killed worker answered just before it died (its last batch of spans died
    // with it).
    for c in &ok {
        assert!(
            gateway_traces.contains(&c.trace_id),
            "no gateway span for {c:?}"
        );
    }
    for c in &ok_without_worker_span {
        assert!(
            c.end <= kill_reaped + KILL_SLACK && c.end + Duration::from_secs(2) >= kill_sent,
            "a successful call has no worker span, and not because its worker was killed: {c:?}"
        );
    }
    assert!(calls.len() >= 6 * CALLS_PER_STEP);
}

/// `at - origin` in seconds, negative when `at` is earlier.
fn signed_secs(at: Instant, origin: Instant) -> f64 {
    if at >= origin {
        (at - origin).as_secs_f64()
    } else {
        -(origin - at).as_secs_f64()
    }
}

/// Regression: compose.yaml once started NATS with `--max_payload 8MB`, a flag nats-server does
/// not have; it printed its usage and exited 0, and compose restarted it forever (found by
/// running the compose file for real, `deploy/compose/smoke-test`). Here the nats service's
/// command and mounted config run as compose runs them, moved onto free loopback ports and a
/// temp store, and must give what the compose healthcheck asks for and the 8 MB payloads.
#[tokio::test]
async fn the_compose_nats_command_and_config_start_a_healthy_jetstream_server_with_8mb_payloads() {
    let compose = std::fs::read_to_string(repo().join("deploy/compose/compose.yaml")).unwrap();
    let nats = compose
        .split("\n  nats:\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("compose.yaml has a nats service");
    let command = nats
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("command:"))
        .expect("the nats service has a command");
    let args: Vec<String> = serde_json::from_str(command.trim()).unwrap();
    assert!(
        nats.contains("- ../config/nats.conf:/etc/nats/nats.conf:ro"),
        "the nats service no longer mounts deploy/config/nats.conf: update this test"
    );
    let store = std::env::temp_dir().join(format!("toolyard-compose-nats-{}", std::process::id()));
    std::fs::create_dir_all(&store).unwrap();
    // The mounted file, with its store (the compose volume at /data) moved into the temp dir:
    // nats-server refuses `-sd` beside a `store_dir`.
    let original = std::fs::read_to_string(repo().join("deploy/config/nats.conf")).unwrap();
    assert!(
        original.contains("store_dir: /data"),
        "nats.conf's store is no longer /data: update this test"
    );
    let conf = store.join("nats.conf");
    let moved = format!("store_dir: \"{}\"", store.join("js").display());
    std::fs::write(&conf, original.replace("store_dir: /data", &moved)).unwrap();
    let args = args.into_iter().map(|a| {
        if a == "/etc/nats/nats.conf" {
            conf.to_string_lossy().into_owned()
        } else {
            a
        }
    });
    let (port, http) = (free_port(), free_port());
    let log = store.join("nats.log");
    let mut child = Command::new(toolyard_testkit::nats_server_bin())
        .args(args)
        .args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-m",
            &http.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // compose.yaml's healthcheck: /healthz?js-enabled-only=true answers 200.
    let healthz = format!("http://127.0.0.1:{http}/healthz?js-enabled-only=true");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(r) = reqwest::get(&healthz).await {
            if r.status() == 200 {
                break;
            }
        }
        let exited = child.try_wait().unwrap();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "nats-server with compose.yaml's command is not healthy ({exited:?}); its output:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let varz = reqwest::get(format!("http://127.0.0.1:{http}/varz"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let varz: Value = serde_json::from_slice(&varz).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&store);
    assert_eq!(varz["max_payload"], 8 * 1024 * 1024, "{varz}");
    assert!(
        varz["jetstream"]["config"]["store_dir"].is_string(),
        "{varz}"
    );
}
