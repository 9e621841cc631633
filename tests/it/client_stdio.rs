//! The stdio client transport against real processes: our own binary, and a Python fixture
//! (`tests/fixtures/fault_server.py`) that misbehaves in every way a server can on stdio.
//! Every wait has a generous timeout; nothing asserts how fast something happened.

use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use toolyard::client::StdioTransport;
use toolyard::client::{
    OutboundKind, OutboundMessage, Transport, TransportError, TransportEvent, TransportLink,
};
use toolyard::proto::RequestId;

const WAIT: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_millis(500);

/// A Python that starts fast: the system one rather than a version manager's shim.
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn fixture(mode: &str) -> StdioTransport {
    StdioTransport::new(python())
        .arg("-S")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/fault_server.py"
        ))
        .arg(mode)
        .name(format!("fault-{mode}"))
        .close_grace(GRACE)
}

struct Conn {
    link: Arc<dyn TransportLink>,
    events: mpsc::UnboundedReceiver<TransportEvent>,
}

async fn start(transport: StdioTransport) -> Conn {
    let (tx, events) = mpsc::unbounded_channel();
    let link = Box::new(transport)
        .start(tx.into())
        .await
        .expect("the transport starts");
    Conn { link, events }
}

impl Conn {
    fn request(&self, id: i64, method: &str, params: Value) {
        self.link.send(OutboundMessage {
            body: json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
                .to_string()
                .into_bytes(),
            kind: OutboundKind::Request {
                id: RequestId::from(id),
                method: method.to_owned().into(),
                headers: Vec::new(),
            },
        });
    }

    fn notify(&self, method: &str) {
        self.link.send(OutboundMessage {
            body: json!({"jsonrpc":"2.0","method":method})
                .to_string()
                .into_bytes(),
            kind: OutboundKind::Notification {
                method: method.into(),
                headers: Vec::new(),
            },
        });
    }

    async fn next(&mut self) -> Option<TransportEvent> {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("no event within 10 s")
    }

    /// The response to `id`, skipping anything else.
    async fn answer(&mut self, id: i64) -> Value {
        loop {
            match self.next().await {
                Some(TransportEvent::Message(bytes)) => {
                    let m: Value = serde_json::from_slice(&bytes).expect("a message is JSON");
                    if m["id"] == json!(id) && m.get("method").is_none() {
                        return m;
                    }
                }
                other => panic!("expected the answer to {id}, got {other:?}"),
            }
        }
    }

    async fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.request(id, method, params);
        self.answer(id).await
    }

    /// The one `Closed` event (messages before it are skipped); then the channel ends, which
    /// shows there is no second one and the transport has finished.
    async fn closed(&mut self) -> TransportError {
        let error = loop {
            match self.next().await {
                Some(TransportEvent::Message(_)) => {}
                Some(TransportEvent::Closed(e)) => break e,
                other => panic!("expected Closed, got {other:?}"),
            }
        };
        match self.next().await {
            None => error,
            Some(other) => panic!("an event after Closed({error:?}): {other:?}"),
        }
    }

    /// `pid` of the fixture, and of its grandchild if it has one.
    async fn pids(&mut self, id: i64) -> (i32, Option<i32>) {
        let r = self.call(id, "pid", json!({})).await;
        let pid = r["result"]["pid"].as_i64().expect("a pid") as i32;
        let grandchild = r["result"]["grandchild"].as_i64().map(|p| p as i32);
        (pid, grandchild)
    }
}

/// `(state, ppid)` of a process, `None` once it is gone (reaped).
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Gone, or a zombie that is not ours to reap (a grandchild whose parent died belongs to
/// init; some container inits never reap).
fn not_running(pid: i32) -> bool {
    match proc_stat(pid) {
        None => true,
        Some(('Z', ppid)) => ppid != std::process::id() as i32,
        Some(_) => false,
    }
}

async fn eventually_gone(pid: i32, what: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !not_running(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} (pid {pid}) still there after 10 s: {:?}",
            proc_stat(pid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Our child processes (thread group leaders whose parent is us), zombies included.
fn children() -> Vec<(i32, char)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((state, ppid)) = proc_stat(pid) {
            if ppid == me {
                found.push((pid, state));
            }
        }
    }
    found
}

#[tokio::test]
async fn toolyard_binary_round_trip() {
    let mut c = start(
        StdioTransport::new(env!("CARGO_BIN_EXE_toolyard"))
            .args(["serve", "--stdio"])
            .name("toolyard"),
    )
    .await;
    let init = c
        .call(
            1,
            "initialize",
            json!({"protocolVersion":"2025-11-25","capabilities":{},
                   "clientInfo":{"name":"it","version":"0"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    c.notify("notifications/initialized");
    let r = c
        .call(
            2,
            "tools/call",
            json!({"name":"echo","arguments":{"message":"over stdio"}}),
        )
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "over stdio", "{r}");
    // Several queued at once: batched into one write, all answered.
    for id in 10..20 {
        c.request(
            id,
            "tools/call",
            json!({"name":"echo","arguments":{"message":format!("m{id}")}}),
        );
    }
    let mut seen = Vec::new();
    for _ in 10..20 {
        match c.next().await {
            Some(TransportEvent::Message(b)) => {
                let m: Value = serde_json::from_slice(&b).unwrap();
                seen.push(m["id"].as_i64().unwrap());
            }
            other => panic!("{other:?}"),
        }
    }
    seen.sort();
    assert_eq!(seen, (10..20).collect::<Vec<_>>());
    tokio::time::timeout(WAIT, c.link.close())
        .await
        .expect("close finishes");
    assert!(matches!(c.closed().await, TransportError::Closed));
}

#[tokio::test]
async fn exit_mid_request_is_reported_with_the_status() {
    let mut c = start(fixture("exit-mid-request")).await;
    let (pid, _) = c.pids(1).await;
    c.request(2, "tools/call", json!({"name":"echo"}));
    let e = c.closed().await;
    assert!(
        matches!(&e, TransportError::Exited(s) if s == "exit status 3"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "server process exited (exit status 3)");
    assert!(proc_stat(pid).is_none(), "the child is reaped");
    c.link.close().await;
}

/// A server that refuses to start usually says why on stderr: the exit error quotes it
/// (the gateway shows it as the source's last error).
#[tokio::test]
async fn an_exit_error_quotes_the_last_stderr_line() {
    let mut c = start(StdioTransport::new("sh").args([
        "-c",
        "echo 'starting' >&2; echo 'fatal: no API key' >&2; exit 2",
    ]))
    .await;
    let e = c.closed().await;
    assert!(
        matches!(&e, TransportError::Exited(s) if s == "exit status 2; its last stderr line: fatal: no API key"),
        "{e:?}"
    );
    c.link.close().await;
}

#[tokio::test]
async fn a_server_ignoring_sigterm_is_killed() {
    let mut c = start(fixture("ignore-sigterm")).await;
    let (pid, _) = c.pids(1).await;
    // The trigger is answered: this mode only misbehaves when asked to stop.
    let r = c.call(2, "ping", json!({})).await;
    assert_eq!(r["result"], json!({}));
    tokio::time::timeout(WAIT, c.link.close())
        .await
        .expect("close finishes, with SIGKILL");
    assert!(matches!(c.closed().await, TransportError::Closed));
    assert!(proc_stat(pid).is_none(), "killed and reaped");
}

#[tokio::test]
async fn closing_stdout_ends_the_connection_and_the_process() {
    let mut c = start(fixture("close-stdout")).await;
    let (pid, _) = c.pids(1).await;
    c.request(2, "tools/call", json!({"name":"echo"}));
    let e = c.closed().await;
    assert!(
        matches!(&e, TransportError::Exited(s) if s == "closed its stdout"),
        "{e:?}"
    );
    // `closed()` saw the channel end: the transport has finished, so the process is gone.
    assert!(proc_stat(pid).is_none(), "killed and reaped");
    // Closing afterwards is harmless and immediate.
    tokio::time::timeout(WAIT, c.link.close()).await.unwrap();
}

#[tokio::test]
async fn a_failed_write_closes_with_io() {
    let mut c = start(fixture("close-stdin")).await;
    let (pid, _) = c.pids(1).await;
    c.request(2, "ping", json!({}));
    // Once the server has closed its stdin, the next write fails.
    let mut id = 3;
    let error = loop {
        tokio::select! {
            event = c.next() => match event {
                Some(TransportEvent::Closed(e)) => break e,
                other => panic!("{other:?}"),
            },
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                c.request(id, "ping", json!({}));
                id += 1;
            }
        }
    };
    let TransportError::Io(msg) = &error else {
        panic!("{error:?}")
    };
    assert!(msg.contains("cannot write to `fault-close-stdin`"), "{msg}");
    assert!(matches!(
        tokio::time::timeout(WAIT, c.events.recv()).await,
        Ok(None)
    ));
    assert!(proc_stat(pid).is_none(), "terminated and reaped");
}

#[tokio::test]
async fn non_json_output_is_malformed_and_closes() {
    let mut c = start(fixture("non-json")).await;
    let (pid, _) = c.pids(1).await;
    c.request(2, "tools/call", json!({"name":"echo"}));
    let e = c.closed().await;
    let TransportError::Malformed(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(msg.contains("\"hello world\""), "{msg}");
    assert!(msg.contains("fault-non-json"), "names the server: {msg}");
    assert!(proc_stat(pid).is_none(), "terminated and reaped");
}

#[tokio::test]
async fn an_oversized_message_is_malformed() {
    let mut c = start(fixture("echo").max_message_bytes(2_000)).await;
    let small = c
        .call(
            1,
            "tools/call",
            json!({"name":"echo","arguments":{"x":"y"}}),
        )
        .await;
    assert!(small["result"].is_object(), "{small}");
    c.request(
        2,
        "tools/call",
        json!({"name":"echo","arguments":{"x":"z".repeat(100_000)}}),
    );
    let e = c.closed().await;
    let TransportError::Malformed(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(msg.contains("2000-byte limit"), "{msg}");
    assert!(msg.len() < 1_000, "quotes only the start: {msg}");
}

#[tokio::test]
async fn a_stderr_flood_does_not_block_answers() {
    let mut c = start(fixture("flood-stderr")).await;
    // Let the flood fill any pipe buffer many times over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in 1..=5 {
        // Each answer comes after another MiB on stderr, including a 100 KB line.
        let r = c
            .call(
                id,
                "tools/call",
                json!({"name":"echo","arguments":{"n":id}}),
            )
            .await;
        let text = r["result"]["content"][0]["text"].as_str().expect("a text");
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({ "n": id })
        );
    }
    tokio::time::timeout(WAIT, c.link.close()).await.unwrap();
    assert!(matches!(c.closed().await, TransportError::Closed));
}

#[tokio::test]
async fn close_kills_grandchildren_too() {
    let mut c = start(fixture("grandchild")).await;
    let (pid, grandchild) = c.pids(1).await;
    let grandchild = grandchild.expect("the fixture spawned a grandchild");
    assert!(!not_running(grandchild), "the grandchild runs");
    let r = c.call(2, "ping", json!({})).await;
    assert_eq!(r["result"], json!({}));
    tokio::time::timeout(WAIT, c.link.close()).await.unwrap();
    assert!(matches!(c.closed().await, TransportError::Closed));
    assert!(proc_stat(pid).is_none(), "the child is reaped");
    assert!(not_running(grandchild), "{:?}", proc_stat(grandchild));
}

#[tokio::test]
async fn dropping_the_link_kills_the_group() {
    let mut c = start(fixture("grandchild")).await;
    let (pid, grandchild) = c.pids(1).await;
    let grandchild = grandchild.unwrap();
    drop(c.link);
    // The transport closes by itself: the one Closed event, then the end.
    let mut closed = 0;
    while let Some(event) = tokio::time::timeout(WAIT, c.events.recv()).await.unwrap() {
        assert!(matches!(
            event,
            TransportEvent::Closed(TransportError::Closed)
        ));
        closed += 1;
    }
    assert_eq!(closed, 1);
    eventually_gone(pid, "the child").await;
    assert!(proc_stat(pid).is_none(), "reaped");
    eventually_gone(grandchild, "the grandchild").await;
}

#[test]
fn runtime_shutdown_kills_and_reaps_the_group() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (link, pid, grandchild) = rt.block_on(async {
        // Ignores SIGTERM: only the guard's thread, with SIGKILL, can end it.
        let mut c = start(fixture("ignore-sigterm")).await;
        let (pid, _) = c.pids(1).await;
        let mut g = start(fixture("grandchild")).await;
        let (_, grandchild) = g.pids(1).await;
        (vec![c.link, g.link], pid, grandchild.unwrap())
    });
    drop(rt);
    drop(link);
    let deadline = std::time::Instant::now() + WAIT;
    while proc_stat(pid).is_some() || !not_running(grandchild) {
        assert!(
            std::time::Instant::now() < deadline,
            "still there after 10 s: child {:?}, grandchild {:?}",
            proc_stat(pid),
            proc_stat(grandchild)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn a_bad_command_fails_to_start_naming_it() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let Err(err) = Box::new(StdioTransport::new("/no/such/mcp-server").arg("--flag"))
        .start(tx.into())
        .await
    else {
        panic!("started a command that does not exist")
    };
    let TransportError::Io(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("/no/such/mcp-server --flag"), "{msg}");
}

#[test]
fn command_lines_are_split_like_a_shell() {
    let t = StdioTransport::from_command_line(r#"npx -y "@scope/pkg" 'a b' c\ d"#).unwrap();
    assert_eq!(t.command_line(), "npx -y @scope/pkg 'a b' 'c d'");
    assert!(matches!(
        StdioTransport::from_command_line("   "),
        Err(TransportError::Io(_))
    ));
    assert!(matches!(
        StdioTransport::from_command_line("npx 'unterminated"),
        Err(TransportError::Io(_))
    ));
    // Secrets stay out of Debug.
    let t = t.env("API_KEY", "hunter2");
    let debug = format!("{t:?}");
    assert!(
        debug.contains("API_KEY") && !debug.contains("hunter2"),
        "{debug}"
    );
}

/// Starts a one-shot Python that prints its environment as one JSON line.
async fn child_env(transport: StdioTransport) -> Value {
    let script = "import json, os, sys\n\
                  print(json.dumps(dict(os.environ)), flush=True)\n\
                  sys.stdin.read()";
    let mut c = start(transport.args(["-S", "-c", script]).close_grace(GRACE)).await;
    let env = match c.next().await {
        Some(TransportEvent::Message(b)) => serde_json::from_slice(&b).unwrap(),
        other => panic!("{other:?}"),
    };
    c.link.close().await;
    env
}

#[tokio::test]
async fn the_environment_is_clean_unless_inherited() {
    let ours: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k != "PATH" && k != "HOME")
        .collect();
    let env = child_env(StdioTransport::new(python()).env("TOOLYARD_CONFIGURED", "1")).await;
    let keys: Vec<&String> = env.as_object().unwrap().keys().collect();
    for key in &keys {
        assert!(
            ["PATH", "HOME", "TOOLYARD_CONFIGURED", "LC_CTYPE"].contains(&key.as_str())
                || StdioTransport::DEFAULT_INHERITED_ENV.contains(&key.as_str()),
            "{key} leaked into a clean environment: {keys:?}"
        );
    }
    assert_eq!(env["TOOLYARD_CONFIGURED"], "1");
    assert_eq!(
        env.get("PATH").and_then(Value::as_str),
        std::env::var("PATH").ok().as_deref()
    );

    let env = child_env(
        StdioTransport::new(python())
            .inherit_env(true)
            .env("TOOLYARD_CONFIGURED", "2"),
    )
    .await;
    assert_eq!(env["TOOLYARD_CONFIGURED"], "2");
    for key in &ours {
        assert!(env.get(key).is_some(), "{key} not inherited");
    }
}

/// The proxy and trust-store variables we have reach the child unless
/// `inherit_env_defaults(false)`; `inherit_env_vars` adds names; `env` wins over both.
#[tokio::test]
async fn inherited_variables_are_the_defaults_plus_what_is_named() {
    // Cargo sets these for every test process; neither is a default.
    let named = "CARGO_MANIFEST_DIR";
    let other = "CARGO_PKG_NAME";
    assert!(std::env::var_os(named).is_some() && std::env::var_os(other).is_some());
    let defaults_we_have: Vec<(&str, String)> = StdioTransport::DEFAULT_INHERITED_ENV
        .iter()
        .filter_map(|k| Some((*k, std::env::var(k).ok()?)))
        .collect();

    let env = child_env(StdioTransport::new(python()).inherit_env_vars([named])).await;
    assert_eq!(env[named], env!("CARGO_MANIFEST_DIR"), "{env}");
    assert!(env.get(other).is_none(), "{other} leaked: {env}");
    for (k, v) in &defaults_we_have {
        assert_eq!(env[k], v.as_str(), "{k} not passed through: {env}");
    }

    let env = child_env(
        StdioTransport::new(python())
            .inherit_env_defaults(false)
            .inherit_env_vars([named, "TOOLYARD_NEVER_SET_ANYWHERE"])
            .env(named, "configured"),
    )
    .await;
    assert_eq!(env[named], "configured", "`env` wins: {env}");
    assert!(env.get("TOOLYARD_NEVER_SET_ANYWHERE").is_none(), "{env}");
    assert!(env.get("PATH").is_some(), "{env}");
    for (k, _) in &defaults_we_have {
        assert!(
            env.get(k).is_none(),
            "{k} passed without the defaults: {env}"
        );
    }
}

/// A `[[clients]]` stdio entry's `inherit_env` reaches the spawned server.
#[tokio::test]
async fn a_clients_entry_passes_what_inherit_env_names() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fault_server.py"
    );
    let entries = toml::from_str::<toolyard::client::ClientsConfig>(&format!(
        "[[clients]]\nname = \"env\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"-S\", {script:?}, \"echo\"]\ninherit_env = [\"CARGO_MANIFEST_DIR\"]\n",
        python()
    ))
    .unwrap()
    .clients;
    let registry = toolyard::client::ClientRegistry::connect(
        &entries,
        toolyard::proto::Implementation::new("registry", "1"),
    )
    .await
    .unwrap();
    let r = registry
        .get("env")
        .unwrap()
        .call_tool("env", json!({}))
        .await
        .unwrap();
    let text = match &r.content[0] {
        toolyard::proto::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("{other:?}"),
    };
    let env: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        env["CARGO_MANIFEST_DIR"],
        env!("CARGO_MANIFEST_DIR"),
        "{env}"
    );
    assert!(env.get("CARGO_PKG_NAME").is_none(), "{env}");
    registry.close().await;
}

#[tokio::test]
async fn the_working_directory_is_set() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let script = "import json, os, sys\n\
                  print(json.dumps({'cwd': os.getcwd()}), flush=True)\n\
                  sys.stdin.read()";
    let mut c = start(
        StdioTransport::new(python())
            .args(["-S", "-c", script])
            .current_dir(dir),
    )
    .await;
    match c.next().await {
        Some(TransportEvent::Message(b)) => {
            let v: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(
                Path::new(v["cwd"].as_str().unwrap())
                    .canonicalize()
                    .unwrap(),
                Path::new(dir).canonicalize().unwrap()
            );
        }
        other => panic!("{other:?}"),
    }
    c.link.close().await;
}

/// 500 times: spawn, one request and its answer, close. Then no process of ours is left,
/// running or zombie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_cycles_leave_no_process_behind() {
    const CYCLES: usize = 500;
    const PARALLEL: usize = 4;
    let mut pids = Vec::with_capacity(CYCLES);
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..PARALLEL {
        tasks.spawn(async move {
            let mut pids = Vec::new();
            for i in (lane..CYCLES).step_by(PARALLEL) {
                let mut c = start(fixture("echo")).await;
                let (pid, _) = c.pids(i as i64).await;
                tokio::time::timeout(WAIT, c.link.close()).await.unwrap();
                assert!(matches!(c.closed().await, TransportError::Closed));
                pids.push(pid);
            }
            pids
        });
    }
    while let Some(lane) = tasks.join_next().await {
        pids.extend(lane.unwrap());
    }
    assert_eq!(pids.len(), CYCLES);
    // Every fixture we ran is gone: not running, and not a zombie of ours.
    let ours: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|&p| proc_stat(p).is_some_and(|(_, ppid)| ppid == std::process::id() as i32))
        .collect();
    assert!(ours.is_empty(), "left behind: {ours:?}");
    // With a process per test (nextest) nothing else of ours runs: no child at all.
    if std::env::var("NEXTEST_EXECUTION_MODE").as_deref() == Ok("process-per-test") {
        assert_eq!(children(), Vec::new());
    }
}

/// Everything logged to a subscriber installed on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn stderr_is_logged_line_by_line_capped_and_rate_limited() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    // A current-thread runtime: every task logs through this thread's subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pid = rt.block_on(async {
        let script = "import sys\n\
                      sys.stderr.write('hello from stderr\\r\\n')\n\
                      sys.stderr.write('L' * 10000 + '\\n')\n\
                      sys.stderr.write(''.join('line %d\\n' % i for i in range(300)))\n\
                      sys.stderr.write('no newline at the end')\n\
                      sys.stderr.flush()\n\
                      print('{\"jsonrpc\":\"2.0\",\"method\":\"ready\"}', flush=True)\n\
                      sys.stdin.read()";
        let mut c = start(
            StdioTransport::new(python())
                .args(["-S", "-c", script])
                .name("chatty")
                .close_grace(GRACE),
        )
        .await;
        assert!(matches!(c.next().await, Some(TransportEvent::Message(_))));
        // close() returns once stderr has been read to its end.
        tokio::time::timeout(WAIT, c.link.close()).await.unwrap();
        assert!(matches!(c.closed().await, TransportError::Closed));
        // The pid, from the log itself.
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("hello from stderr"))
            .unwrap_or_else(|| panic!("stderr not logged:\n{log}"));
        line.split("pid=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_owned()
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let hello = log
        .lines()
        .find(|l| l.contains("hello from stderr"))
        .unwrap();
    assert!(hello.contains("toolyard_client::stdio"), "{hello}");
    assert!(hello.contains("server=chatty"), "{hello}");
    assert!(
        hello.contains("stderr: hello from stderr server="),
        "no \\r: {hello:?}"
    );
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    let long = log.lines().find(|l| l.contains("LLLL")).unwrap();
    let ls = long.matches('L').count();
    assert!(
        (4000..=4200).contains(&ls) && long.contains("L […]"),
        "capped at 4 KiB: {ls} L's"
    );
    assert!(log.contains("more lines not logged"), "{log}");
    assert!(log.lines().count() < 150, "rate limited: {log}");
}

// The same faults through the `Client`: a pending call fails promptly with the transport's
// error, later calls fail at once, and closing always finishes.

use toolyard::client::{Client, ClientBuilder, ClientError};
use toolyard::proto::Implementation;

fn client_builder() -> ClientBuilder {
    ClientBuilder::new(Implementation::new("client-stdio-test", "1.0"))
}

async fn connect(transport: StdioTransport) -> Client {
    tokio::time::timeout(WAIT, client_builder().connect(transport))
        .await
        .expect("connects within 10 s")
        .expect("connects")
}

async fn fixture_pid(client: &Client) -> i32 {
    let r = client.request("pid", json!({})).await.expect("pid");
    r["pid"].as_i64().unwrap() as i32
}

async fn echo_text(client: &Client, args: Value) -> Result<String, ClientError> {
    let r = tokio::time::timeout(WAIT, client.call_tool("echo", args))
        .await
        .expect("an answer or an error within 10 s")?;
    let v = serde_json::to_value(&r).unwrap();
    Ok(v["content"][0]["text"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn client_over_the_toolyard_binary() {
    let client =
        connect(StdioTransport::new(env!("CARGO_BIN_EXE_toolyard")).args(["serve", "--stdio"]))
            .await;
    let text = echo_text(&client, json!({"message":"through the client"}))
        .await
        .unwrap();
    assert_eq!(text, "through the client");
    tokio::time::timeout(WAIT, client.close()).await.unwrap();
}

#[tokio::test]
async fn client_over_a_legacy_server() {
    let client = connect(fixture("echo")).await;
    assert!(!client.is_modern());
    let text = echo_text(&client, json!({"a":1})).await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"a":1})
    );
    let pid = fixture_pid(&client).await;
    tokio::time::timeout(WAIT, client.close()).await.unwrap();
    assert!(proc_stat(pid).is_none(), "closed and reaped");
}

/// The pending call's error, then a later call's.
async fn client_fault(mode: &str) -> (ClientError, ClientError, i32) {
    let client = connect(fixture(mode)).await;
    let pid = fixture_pid(&client).await;
    let first = echo_text(&client, json!({}))
        .await
        .expect_err("the call fails");
    let second = echo_text(&client, json!({}))
        .await
        .expect_err("calls after the end fail too");
    tokio::time::timeout(WAIT, client.close()).await.unwrap();
    (first, second, pid)
}

#[tokio::test]
async fn client_call_fails_when_the_server_exits() {
    let (first, second, pid) = client_fault("exit-mid-request").await;
    assert!(
        matches!(&first, ClientError::Transport(TransportError::Exited(s)) if s == "exit status 3"),
        "{first:?}"
    );
    assert_eq!(first.to_string(), "server process exited (exit status 3)");
    assert!(
        matches!(second, ClientError::Transport(_) | ClientError::Closed),
        "{second:?}"
    );
    assert!(proc_stat(pid).is_none());
}

#[tokio::test]
async fn client_call_fails_when_stdout_closes() {
    let (first, _, pid) = client_fault("close-stdout").await;
    assert!(
        matches!(&first, ClientError::Transport(TransportError::Exited(s)) if s == "closed its stdout"),
        "{first:?}"
    );
    eventually_gone(pid, "the server").await;
}

#[tokio::test]
async fn client_call_fails_on_non_json_output() {
    let (first, _, pid) = client_fault("non-json").await;
    let ClientError::Transport(TransportError::Malformed(msg)) = &first else {
        panic!("{first:?}")
    };
    assert!(msg.contains("hello world"), "{msg}");
    eventually_gone(pid, "the server").await;
}

#[tokio::test]
async fn client_slow_call_times_out_and_close_finishes() {
    let client = tokio::time::timeout(
        WAIT,
        client_builder()
            .request_timeout(Duration::from_millis(300))
            .connect(fixture("slow")),
    )
    .await
    .unwrap()
    .unwrap();
    let pid = fixture_pid(&client).await;
    let e = echo_text(&client, json!({})).await.expect_err("times out");
    assert!(matches!(e, ClientError::Timeout { .. }), "{e:?}");
    // The server is stuck in its 30 s sleep: stdin closing is not enough, SIGTERM is.
    tokio::time::timeout(WAIT, client.close()).await.unwrap();
    assert!(proc_stat(pid).is_none());
}

#[tokio::test]
async fn client_close_kills_a_server_ignoring_sigterm() {
    let client = connect(fixture("ignore-sigterm")).await;
    let pid = fixture_pid(&client).await;
    assert_eq!(echo_text(&client, json!({})).await.unwrap(), "{}");
    tokio::time::timeout(WAIT, client.close()).await.unwrap();
    assert!(proc_stat(pid).is_none());
}

#[tokio::test]
async fn client_answers_despite_a_stderr_flood() {
    let client = connect(fixture("flood-stderr")).await;
    for i in 0..3 {
        let text = echo_text(&client, json!({ "i": i })).await.unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({ "i": i })
        );
    }
    tokio::time::timeout(WAIT, client.close()).await.unwrap();
}

#[tokio::test]
async fn dropping_the_client_ends_the_server() {
    let client = connect(fixture("grandchild")).await;
    let r = client.request("pid", json!({})).await.unwrap();
    let pid = r["pid"].as_i64().unwrap() as i32;
    let grandchild = r["grandchild"].as_i64().unwrap() as i32;
    drop(client);
    eventually_gone(pid, "the server").await;
    eventually_gone(grandchild, "the grandchild").await;
}

#[tokio::test]
async fn a_registry_connects_named_servers_and_looks_them_up() {
    use toolyard::client::{ClientRegistry, ClientsConfig};
    let bin = env!("CARGO_BIN_EXE_toolyard");
    let config: ClientsConfig = toml::from_str(&format!(
        r#"
        [[clients]]
        name = "modern"
        transport = "stdio"
        command = "{bin}"
        args = ["serve", "--stdio"]
        [[clients]]
        name = "legacy"
        transport = "stdio"
        command = "{bin}"
        args = ["serve", "--stdio"]
        protocol = "2025-06-18"
        timeout_ms = 5000
        "#
    ))
    .unwrap();
    let registry = ClientRegistry::connect(
        &config.clients,
        toolyard::proto::Implementation::new("t", "1"),
    )
    .await
    .unwrap();
    assert_eq!(registry.names(), ["modern", "legacy"]);
    assert!(registry.get("modern").unwrap().is_modern());
    assert_eq!(
        registry.get("legacy").unwrap().protocol_version(),
        Some(toolyard::proto::ProtocolVersion::V2025_06_18)
    );
    let echoed = registry
        .get("legacy")
        .unwrap()
        .call_tool("echo", json!({"message": "named"}))
        .await
        .unwrap();
    assert!(
        matches!(&echoed.content[..], [toolyard::proto::ContentBlock::Text(t)] if t.text == "named"),
        "{echoed:?}"
    );
    assert!(registry.get("missing").is_none());
    registry.close().await;
    let bad: ClientsConfig = toml::from_str(
        r#"
        [[clients]]
        name = "nothing-here"
        transport = "stdio"
        command = "/no/such/program"
        "#,
    )
    .unwrap();
    let e = ClientRegistry::connect(&bad.clients, toolyard::proto::Implementation::new("t", "1"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("nothing-here"), "{e}");
}

/// A server-to-client request with positional params cannot be read, but it still gets an
/// answer: -32602 addressed to its id (regression: the client logged it and never answered,
/// so the server waited forever for its reply).
#[tokio::test]
async fn a_server_request_with_positional_params_is_answered_with_invalid_params() {
    let client = connect(fixture("positional-question")).await;
    let reply = echo_text(&client, json!({}))
        .await
        .expect("the fixture answers with the client's reply");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["id"], "q-positional", "{reply}");
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must be an object"),
        "{reply}"
    );
    client.close().await;
}
