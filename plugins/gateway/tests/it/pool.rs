//! The plugin host's pools (`host::pool`) against real processes: a Python fixture
//! (`tests/fixtures/pool_server.py`) that records every start in a state directory, crashes on
//! demand and fails every start while a marker file exists; `false`; a closed port; our own
//! HTTP server. Every wait has a generous timeout; nothing asserts how fast something happened.

use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolyard::client::{ClientBuilder, ClientError, ProtocolChoice};
use toolyard::proto::{ContentBlock, Implementation};
use toolyard_gateway::{
    ClientFactory, EnvVar, FailureMode, HealthState, HostError, Launch, Lifecycle, Naming,
    ProcessSpec, RemoteSpec, RemoteTransport, SourcePool, SourceSpec, Supervision,
};

const WAIT: Duration = Duration::from_secs(15);

/// A Python that starts fast: the system one rather than a version manager's shim.
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn factory() -> ClientFactory {
    Arc::new(|| ClientBuilder::new(Implementation::new("pool-test", "1")))
}

/// Quick restarts, a circuit after `max_crashes`, no background probe unless asked.
fn supervision(max_crashes: u32) -> Supervision {
    Supervision {
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        max_crashes,
        window: Duration::from_secs(60),
        probe_interval: Duration::from_secs(3600),
    }
}

fn spec(name: &str, launch: Launch, lifecycle: Lifecycle, supervision: Supervision) -> SourceSpec {
    SourceSpec {
        name: name.into(),
        version: None,
        description: None,
        launch,
        lifecycle,
        call_timeout: Duration::from_secs(10),
        startup_timeout: Duration::from_secs(10),
        protocol: ProtocolChoice::Auto,
        supervision,
        failure_mode: FailureMode::Skip,
        naming: Naming::for_source(name),
        audience: None,
    }
}

fn pool(spec: SourceSpec) -> SourcePool {
    SourcePool::new(Arc::new(spec), factory())
}

/// One fixture's state directory: what it started, and the marker that makes it fail.
struct Fixture {
    dir: PathBuf,
    tag: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Fixture {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let tag = format!("pooltest-{name}-{}-{nanos}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        std::fs::create_dir_all(&dir).unwrap();
        Fixture { dir, tag }
    }

    fn launch(&self) -> Launch {
        Launch::Process(ProcessSpec {
            command: python().into(),
            args: vec![
                "-S".into(),
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool_server.py").into(),
                self.dir.to_string_lossy().into_owned(),
                self.tag.clone(),
            ],
            env: Vec::new(),
            inherit_env: Vec::new(),
            inherit_env_defaults: true,
            cwd: None,
        })
    }

    /// Every process the fixture started, in order.
    fn started(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("starts"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn starts(&self) -> usize {
        self.started().len()
    }

    fn set_failing(&self, on: bool) {
        let marker = self.dir.join("fail");
        if on {
            std::fs::write(marker, b"").unwrap();
        } else {
            let _ = std::fs::remove_file(marker);
        }
    }

    /// Its processes that are still ours: running, or zombies we did not reap.
    fn left(&self) -> Vec<(i32, char)> {
        let me = std::process::id() as i32;
        self.started()
            .into_iter()
            .filter_map(|pid| {
                let (state, ppid) = proc_stat(pid)?;
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let ours = state == 'Z' || String::from_utf8_lossy(&cmdline).contains(&self.tag);
                (ppid == me && ours).then_some((pid, state))
            })
            .collect()
    }

    /// Waits until exactly `n` of its processes are left.
    async fn wait_left(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = self.left();
            if left.len() == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "expected {n} processes left, found {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// (state, parent pid) of a process.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The text of a tool result.
fn text(result: &toolyard::proto::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

/// The pid of the process behind a connection.
async fn pid_of(client: &toolyard::client::Client) -> i32 {
    let v: Value = client.request("pid", json!({})).await.unwrap();
    v["pid"].as_i64().unwrap() as i32
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Leases until the circuit opens; returns the failures before it.
async fn lease_until_unhealthy(pool: &SourcePool) -> Vec<HostError> {
    let mut failures = Vec::new();
    for _ in 0..20 {
        match tokio::time::timeout(WAIT, pool.lease())
            .await
            .expect("a lease ends")
        {
            Ok(_) => panic!("the source should fail"),
            Err(HostError::Unhealthy { source, reason }) => {
                assert_eq!(source, pool.spec().name);
                assert!(!reason.is_empty());
                return failures;
            }
            Err(e) => failures.push(e),
        }
    }
    panic!("never unhealthy: {failures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singleton_reuses_one_process() {
    let fx = Fixture::new("singleton");
    let pool = pool(spec(
        "single",
        fx.launch(),
        Lifecycle::Singleton,
        supervision(3),
    ));
    assert_eq!(pool.health().state, HealthState::Starting);
    let mut pids = HashSet::new();
    for i in 0..5 {
        let lease = pool.lease().await.unwrap();
        pids.insert(pid_of(&lease).await);
        let r = lease.call_tool("echo", json!({"i": i})).await.unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&text(&r)).unwrap(),
            json!({"i": i})
        );
    }
    // Concurrent leases share the connection too, including the first start.
    let leases = futures_util::future::join_all((0..8).map(|_| pool.lease())).await;
    for lease in &leases {
        let lease = lease.as_ref().unwrap();
        pids.insert(pid_of(lease).await);
    }
    let h = pool.health();
    assert_eq!(h.in_flight, 8);
    drop(leases);
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_eq!(fx.starts(), 1);
    let h = pool.health();
    assert_eq!(h.state, HealthState::Healthy);
    assert_eq!((h.processes, h.in_flight, h.restarts), (1, 0, 0));
    assert!(serde_json::to_value(&h).unwrap()["state"] == "healthy");

    pool.shutdown().await;
    assert_eq!(pool.health().state, HealthState::Stopped);
    assert_eq!(pool.health().processes, 0);
    fx.wait_left(0).await;
    assert!(matches!(
        pool.lease().await,
        Err(HostError::Stopped { source }) if source == "single"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singleton_restarts_a_process_that_died_mid_call() {
    let fx = Fixture::new("restart");
    let pool = pool(spec(
        "restart",
        fx.launch(),
        Lifecycle::Singleton,
        supervision(5),
    ));
    let lease = pool.lease().await.unwrap();
    let first = pid_of(&lease).await;
    let call = tokio::spawn(async move {
        let r = lease.call_tool("slow", json!({"delay_ms": 30000})).await;
        if let Err(e) = &r {
            lease.report(e);
        }
        r
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let r = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
    assert!(matches!(r, Err(ClientError::Transport(_))), "{r:?}");

    // The next lease starts a new process.
    let lease = pool.lease().await.unwrap();
    let second = pid_of(&lease).await;
    assert_ne!(first, second);
    let h = pool.health();
    assert_eq!(h.state, HealthState::Healthy);
    assert_eq!((h.restarts, h.crashes_in_window, h.processes), (1, 1, 1));
    assert!(h.last_error.is_some());

    // A crash noticed without a report (the lease sees its connection closed) counts too.
    let r = lease.call_tool("crash", json!({})).await;
    assert!(r.is_err(), "{r:?}");
    drop(lease);
    let lease = pool.lease().await.unwrap();
    let third = pid_of(&lease).await;
    assert!(third != second && third != first);
    let h = pool.health();
    assert_eq!((h.restarts, h.crashes_in_window), (2, 2));

    // Concurrent leases after a crash share one restart.
    let r = lease.call_tool("crash", json!({})).await.unwrap_err();
    lease.report(&r);
    drop(lease);
    let leases = futures_util::future::join_all((0..8).map(|_| pool.lease())).await;
    let mut pids = HashSet::new();
    for lease in &leases {
        pids.insert(pid_of(lease.as_ref().unwrap()).await);
    }
    drop(leases);
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(!pids.contains(&third));
    let h = pool.health();
    assert_eq!((h.restarts, h.crashes_in_window, h.processes), (3, 3, 1));
    assert_eq!(fx.starts(), 4);
    pool.shutdown().await;
    fx.wait_left(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backoff_longer_than_the_startup_timeout_fails_the_lease_at_once() {
    let fx = Fixture::new("backoff");
    let mut sup = supervision(5);
    sup.backoff_initial = Duration::from_secs(60);
    sup.backoff_max = Duration::from_secs(60);
    let mut s = spec("backoff", fx.launch(), Lifecycle::Singleton, sup);
    s.startup_timeout = Duration::from_secs(5);
    let pool = pool(s);
    let lease = pool.lease().await.unwrap();
    let r = lease.call_tool("crash", json!({})).await.unwrap_err();
    lease.report(&r);
    drop(lease);
    let e = tokio::time::timeout(WAIT, pool.lease())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&e, HostError::Backoff { source, retry_in } if source == "backoff" && *retry_in > Duration::from_secs(5)),
        "{e}"
    );
    assert_eq!(fx.starts(), 1, "nothing started during the backoff");
    // A probe does not wait for the backoff.
    pool.probe().await.unwrap();
    let lease = pool.lease().await.unwrap();
    lease.call_tool("echo", json!({})).await.unwrap();
    drop(lease);
    assert_eq!(fx.starts(), 2);
    pool.shutdown().await;
    fx.wait_left(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_crashing_on_every_start_turns_unhealthy_until_a_probe_succeeds() {
    let fx = Fixture::new("crashloop");
    fx.set_failing(true);
    let pool = pool(spec(
        "crashloop",
        fx.launch(),
        Lifecycle::Singleton,
        supervision(3),
    ));
    let failures = lease_until_unhealthy(&pool).await;
    assert_eq!(failures.len(), 3, "{failures:?}");
    for f in &failures {
        assert!(
            matches!(f, HostError::Connect { source, .. } if source == "crashloop"),
            "{f}"
        );
        assert!(f.to_string().contains("crashloop"), "{f}");
    }
    assert_eq!(fx.starts(), 3);
    let h = pool.health();
    assert_eq!(h.state, HealthState::Unhealthy);
    assert_eq!((h.crashes_in_window, h.processes), (3, 0));
    assert!(h.last_error.is_some());

    // Fail fast, without starting anything.
    for _ in 0..20 {
        let r = tokio::time::timeout(WAIT, pool.lease()).await.unwrap();
        assert!(matches!(r, Err(HostError::Unhealthy { .. })), "{r:?}");
    }
    assert_eq!(fx.starts(), 3);

    // Another source is not affected.
    let other_fx = Fixture::new("bystander");
    let other = self::pool(spec(
        "bystander",
        other_fx.launch(),
        Lifecycle::Singleton,
        supervision(3),
    ));
    let lease = other.lease().await.unwrap();
    lease.call_tool("echo", json!({})).await.unwrap();
    drop(lease);
    assert_eq!(other.health().state, HealthState::Healthy);

    // A probe while the fault lasts fails; once it is gone, a probe closes the circuit.
    assert!(pool.probe().await.is_err());
    assert_eq!(pool.health().state, HealthState::Unhealthy);
    fx.set_failing(false);
    pool.probe().await.unwrap();
    let h = pool.health();
    assert_eq!(h.state, HealthState::Healthy);
    assert_eq!(h.crashes_in_window, 0);
    assert_eq!(h.processes, 1, "the probe's connection serves");
    let lease = pool.lease().await.unwrap();
    lease.call_tool("echo", json!({})).await.unwrap();
    drop(lease);
    assert_eq!(fx.starts(), 5);

    pool.shutdown().await;
    other.shutdown().await;
    fx.wait_left(0).await;
    other_fx.wait_left(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_probe_closes_the_circuit_when_the_fault_goes_away() {
    let fx = Fixture::new("probe");
    fx.set_failing(true);
    let mut sup = supervision(2);
    sup.probe_interval = Duration::from_millis(100);
    let pool = pool(spec(
        "probe",
        fx.launch(),
        Lifecycle::Pooled {
            size: 2,
            min_idle: 0,
            max_concurrency: 2,
            idle: Duration::from_secs(60),
        },
        sup,
    ));
    lease_until_unhealthy(&pool).await;
    // The prober keeps trying while the fault lasts.
    let before = fx.starts();
    wait_for("the prober tries again", || fx.starts() > before).await;
    assert_eq!(pool.health().state, HealthState::Unhealthy);
    fx.set_failing(false);
    wait_for("the prober closes the circuit", || {
        pool.health().state == HealthState::Healthy
    })
    .await;
    let lease = pool.lease().await.unwrap();
    lease.call_tool("echo", json!({})).await.unwrap();
    drop(lease);
    pool.shutdown().await;
    fx.wait_left(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_exits_at_once_turns_unhealthy() {
    let launch = Launch::Process(ProcessSpec {
        command: "false".into(),
        args: Vec::new(),
        env: Vec::new(),
        inherit_env: Vec::new(),
        inherit_env_defaults: true,
        cwd: None,
    });
    let pool = pool(spec("false", launch, Lifecycle::Transient, supervision(2)));
    let failures = lease_until_unhealthy(&pool).await;
    assert_eq!(failures.len(), 2, "{failures:?}");
    let h = pool.health();
    assert_eq!(
        (h.state, h.processes, h.in_flight),
        (HealthState::Unhealthy, 0, 0)
    );
    let e = pool.lease().await.unwrap_err();
    assert!(e.to_string().contains("`false` is unhealthy"), "{e}");
}

#[tokio::test]
async fn secrets_never_appear_in_errors() {
    let launch = Launch::Process(ProcessSpec {
        command: "/nonexistent/mcp-server".into(),
        args: vec!["--token".into(), "s3cr3t-value".into()],
        env: vec![EnvVar {
            name: "TOKEN".into(),
            value: "s3cr3t-value".into(),
            secret: true,
        }],
        inherit_env: Vec::new(),
        inherit_env_defaults: true,
        cwd: None,
    });
    let pool = pool(spec(
        "secretive",
        launch,
        Lifecycle::Singleton,
        supervision(1),
    ));
    let e = pool.lease().await.unwrap_err();
    assert!(matches!(e, HostError::Connect { .. }), "{e}");
    let shown = format!("{e} {e:?} {:?}", pool.health());
    assert!(shown.contains("secretive"), "{shown}");
    assert!(!shown.contains("s3cr3t-value"), "{shown}");
    let e = pool.lease().await.unwrap_err();
    assert!(matches!(e, HostError::Unhealthy { .. }), "{e}");
    assert!(!e.to_string().contains("s3cr3t-value"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_leases_leave_no_process_behind() {
    const CYCLES: usize = 200;
    const LANES: usize = 4;
    let fx = Fixture::new("transient");
    let pool = pool(spec(
        "transient",
        fx.launch(),
        Lifecycle::Transient,
        supervision(3),
    ));
    let mut lanes = tokio::task::JoinSet::new();
    for lane in 0..LANES {
        let pool = pool.clone();
        lanes.spawn(async move {
            let mut pids = Vec::new();
            for i in (lane..CYCLES).step_by(LANES) {
                let lease = pool.lease().await.unwrap();
                let r = lease.call_tool("pid", json!({"i": i})).await.unwrap();
                pids.push(text(&r).parse::<i32>().unwrap());
            }
            pids
        });
    }
    let mut pids = HashSet::new();
    while let Some(lane) = lanes.join_next().await {
        pids.extend(lane.unwrap());
    }
    assert_eq!(pids.len(), CYCLES, "a process per lease");
    assert_eq!(fx.starts(), CYCLES);
    wait_for("every transient process closed", || {
        pool.health().processes == 0
    })
    .await;
    fx.wait_left(0).await;
    let h = pool.health();
    assert_eq!(
        (h.state, h.in_flight, h.restarts),
        (HealthState::Healthy, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_caps_processes_and_concurrency() {
    const SIZE: usize = 2;
    const CAP: usize = 3;
    let fx = Fixture::new("pooled");
    let mut s = spec(
        "pooled",
        fx.launch(),
        Lifecycle::Pooled {
            size: SIZE,
            min_idle: 0,
            max_concurrency: CAP,
            idle: Duration::from_secs(60),
        },
        supervision(3),
    );
    s.call_timeout = Duration::from_secs(2);
    let pool = pool(s);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let (pool, in_flight, most) = (pool.clone(), in_flight.clone(), most.clone());
        tasks.spawn(async move {
            let lease = tokio::time::timeout(WAIT, async {
                loop {
                    // Waiting is bounded by the call timeout: try again.
                    match pool.lease().await {
                        Ok(lease) => return lease,
                        Err(HostError::Timeout { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            })
            .await
            .unwrap();
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            assert!(pool.health().in_flight <= SIZE * CAP);
            let r = lease
                .call_tool("slow", json!({"delay_ms": 300}))
                .await
                .unwrap();
            in_flight.fetch_sub(1, Ordering::SeqCst);
            text(&r).parse::<i32>().unwrap()
        });
    }
    let mut pids = HashSet::new();
    while let Some(pid) = tasks.join_next().await {
        pids.insert(pid.unwrap());
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= SIZE * CAP, "{most} calls at once");
    assert!(pids.len() <= SIZE, "{pids:?}");
    assert!(fx.starts() <= SIZE);
    assert_eq!(pool.health().processes, fx.starts());

    // With every permit taken, one more lease waits for the call timeout.
    let mut held = Vec::new();
    for _ in 0..SIZE * CAP {
        held.push(pool.lease().await.unwrap());
    }
    assert_eq!(pool.health().in_flight, SIZE * CAP);
    assert_eq!(fx.starts(), SIZE);
    let r = tokio::time::timeout(WAIT, pool.lease()).await.unwrap();
    assert!(matches!(r, Err(HostError::Timeout { .. })), "{r:?}");
    // A released permit serves a waiting lease.
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.lease().await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.pop();
    tokio::time::timeout(WAIT, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    drop(held);
    assert_eq!(fx.starts(), SIZE);
    pool.shutdown().await;
    fx.wait_left(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_stops_idle_processes_down_to_min_idle() {
    let fx = Fixture::new("reaper");
    let pool = pool(spec(
        "reaper",
        fx.launch(),
        Lifecycle::Pooled {
            size: 3,
            min_idle: 1,
            max_concurrency: 1,
            idle: Duration::from_millis(200),
        },
        supervision(3),
    ));
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(pool.lease().await.unwrap());
    }
    let mut pids = HashSet::new();
    for lease in &held {
        pids.insert(pid_of(lease).await);
    }
    assert_eq!(pids.len(), 3);
    assert_eq!(pool.health().processes, 3);
    drop(held);
    wait_for("idle processes stopped", || pool.health().processes == 1).await;
    fx.wait_left(1).await;
    // It stays at min_idle, and the warm one serves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pool.health().processes, 1);
    let lease = pool.lease().await.unwrap();
    assert!(pids.contains(&pid_of(&lease).await));
    drop(lease);
    assert_eq!(fx.starts(), 3);
    // Dropping the pool (no shutdown) ends the reaper and closes what is left.
    drop(pool);
    fx.wait_left(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_everything() {
    let fx = Fixture::new("shutdown");
    let pool = pool(spec(
        "shutdown",
        fx.launch(),
        Lifecycle::Pooled {
            size: 2,
            min_idle: 0,
            max_concurrency: 1,
            idle: Duration::from_secs(60),
        },
        supervision(3),
    ));
    let a = pool.lease().await.unwrap();
    let b = pool.lease().await.unwrap();
    pid_of(&a).await;
    drop(b);
    fx.wait_left(2).await;
    tokio::time::timeout(WAIT, pool.shutdown()).await.unwrap();
    let h = pool.health();
    assert_eq!((h.state, h.processes), (HealthState::Stopped, 0));
    fx.wait_left(0).await;
    // The lease still held sees its connection closed; that is no crash.
    assert!(a.call_tool("echo", json!({})).await.is_err());
    drop(a);
    assert_eq!(pool.health().crashes_in_window, 0);
    assert!(matches!(pool.lease().await, Err(HostError::Stopped { .. })));
    assert!(matches!(pool.probe().await, Err(HostError::Stopped { .. })));
}

#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_is_down_fails_promptly_and_turns_unhealthy() {
    for transport in [
        RemoteTransport::Auto,
        RemoteTransport::StreamableHttp,
        RemoteTransport::Sse,
    ] {
        let closed = toolyard_testkit::ClosedPort::new();
        let port = closed.port();
        let launch = Launch::Remote(RemoteSpec {
            url: format!("http://127.0.0.1:{port}/mcp"),
            transport,
            headers: vec![("Authorization".into(), "Bearer remote-secret-token".into())],
        });
        let pool = pool(spec("down", launch, Lifecycle::Transient, supervision(2)));
        let failures = lease_until_unhealthy(&pool).await;
        assert_eq!(failures.len(), 2, "{transport:?}: {failures:?}");
        let h = pool.health();
        assert_eq!((h.state, h.processes), (HealthState::Unhealthy, 0));
        let shown = format!("{failures:?} {h:?}");
        assert!(!shown.contains("remote-secret-token"), "{shown}");
        assert!(matches!(
            pool.lease().await,
            Err(HostError::Unhealthy { .. })
        ));
    }
}

#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_source_is_one_shared_connection() {
    use toolyard::http::{HttpConfig, Security};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = toolyard_testkit::demo(toolyard::ServerBuilder::new("pool-remote", "0"))
        .start()
        .await
        .unwrap();
    let config = HttpConfig {
        security: Security {
            bearer_tokens: vec!["remote-token".into()],
            ..Security::loopback()
        },
        ..HttpConfig::default()
    };
    let app = toolyard::http::router(server, config).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let launch = Launch::Remote(RemoteSpec {
        url: format!("http://127.0.0.1:{port}/mcp"),
        transport: RemoteTransport::StreamableHttp,
        headers: vec![("Authorization".into(), "Bearer remote-token".into())],
    });
    // The lifecycle does not matter for a remote source.
    let pool = pool(spec("remote", launch, Lifecycle::Transient, supervision(3)));
    for i in 0..5 {
        let lease = pool.lease().await.unwrap();
        let r = lease
            .call_tool("echo", json!({"message": format!("hi {i}")}))
            .await
            .unwrap();
        assert!(text(&r).contains(&format!("hi {i}")), "{r:?}");
    }
    let h = pool.health();
    assert_eq!(
        (h.state, h.processes, h.restarts),
        (HealthState::Healthy, 1, 0)
    );
    pool.shutdown().await;
    assert_eq!(pool.health().processes, 0);
    task.abort();
}
