//! The gateway under faults, end to end: `toolyard serve --config <file> --http ADDR` as a
//! subprocess, our Streamable HTTP client downstream, real upstream processes (Toolyard's own
//! `serve --stdio`, and the Python fixtures `pool_server.py` (the gateway crate's) and
//! `gateway_faults/once_server.py`). Upstream processes are found and counted through /proc
//! (descendants of the gateway process); restarts and health through the admin API.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolyard::client::StreamableHttpTransport;
use toolyard::client::{Client, ClientBuilder, ClientError};
use toolyard::proto::{CallToolResult, ContentBlock, Implementation};
use toolyard_testkit::ServerProcess as Process;

const TOKEN: &str = "faults-adm1n";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_toolyard")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("toolyard-gwf-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A sub-directory (a fixture's state directory).
    fn dir(&self, name: &str) -> PathBuf {
        let d = self.0.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TOML string literal (Rust's escaping of quotes and backslashes is TOML's; the paths
/// and names quoted here are plain ASCII).
fn q(s: impl AsRef<str>) -> String {
    format!("{:?}", s.as_ref())
}

/// `[[sources]]` running `toolyard serve --stdio`, with extra `key = value` lines.
fn toolyard_source(name: &str, extra: &str) -> String {
    format!(
        "[[sources]]\nname = {}\ncommand = {}\nargs = [\"serve\", \"--stdio\"]\n{extra}\n",
        q(name),
        q(bin())
    )
}

/// `[[sources]]` running `pool_server.py STATE` (the fixture that fails every start while
/// `STATE/fail` exists).
fn pool_source(name: &str, state: &Path, extra: &str) -> String {
    // The gateway crate's pool fixture, shared rather than copied.
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/gateway/tests/fixtures/pool_server.py");
    format!(
        "[[sources]]\nname = {}\ncommand = {}\nargs = [{}, {}]\n{extra}\n",
        q(name),
        q(python()),
        q(script.to_str().unwrap()),
        q(state.to_str().unwrap())
    )
}

fn write_config(scratch: &Scratch, body: &str) -> PathBuf {
    let path = scratch.path("gateway.toml");
    std::fs::write(
        &path,
        format!("[gateway]\nadmin_token = {}\n\n{body}", q(TOKEN)),
    )
    .unwrap();
    path
}

async fn start_gateway(config: &Path) -> Process {
    let config = config.to_str().unwrap().to_owned();
    tokio::task::spawn_blocking(move || Process::start(bin(), &["serve", "--config", &config]))
        .await
        .unwrap()
}

async fn connect(gateway: &Process) -> Client {
    ClientBuilder::new(Implementation::new("gateway-faults", "1"))
        .cache(false)
        .request_timeout(Duration::from_secs(60))
        .connect(StreamableHttpTransport::new(gateway.url()))
        .await
        .unwrap()
}

/// `GET /admin/sources`: the status of source `name`.
async fn status(gateway: &Process, name: &str) -> Value {
    let body = reqwest::Client::new()
        .get(format!("{}/admin/sources", gateway.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let list: Value = serde_json::from_slice(&body).unwrap();
    list["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no source `{name}` in {list}"))
        .clone()
}

fn texts(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A call's text: `Ok` for a result, `Err` for an error result or a protocol error.
fn outcome(r: Result<CallToolResult, ClientError>) -> Result<String, String> {
    match r {
        Ok(result) if result.failed() => Err(texts(&result.content)),
        Ok(result) => Ok(texts(&result.content)),
        Err(e) => Err(e.to_string()),
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> (Result<String, String>, Duration) {
    let started = Instant::now();
    let r = client.call_tool(tool, args).await;
    (outcome(r), started.elapsed())
}

async fn tool_names(client: &Client) -> Result<Vec<String>, ClientError> {
    Ok(client
        .list_all_tools()
        .await?
        .into_iter()
        .map(|t| t.name)
        .collect())
}

async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within {within:?}");
}

/// A process seen in /proc.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    state: char,
    cmdline: String,
}

/// Every upstream process under `root`: its descendants but the orphan watchdog (one per
/// gateway process, started with its first upstream), which is not an upstream.
fn descendants(root: u32) -> Vec<Proc> {
    let mut all = all_descendants(root);
    all.retain(|p| !is_watchdog(p));
    all
}

/// Every descendant of `root` (children, their children, ...), zombies included.
fn all_descendants(root: u32) -> Vec<Proc> {
    let mut children: HashMap<u32, Vec<Proc>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let Some(ppid) = fields.next().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .replace('\0', " ")
                    .trim()
                    .to_owned()
            })
            .unwrap_or_default();
        children.entry(ppid).or_default().push(Proc {
            pid,
            state,
            cmdline,
        });
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        for c in children.get(&p).into_iter().flatten() {
            queue.push(c.pid);
            out.push(c.clone());
        }
    }
    out
}

fn is_watchdog(p: &Proc) -> bool {
    p.cmdline.contains(toolyard::client::orphans::WATCHDOG_ARG)
}

fn kill9(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {pid}");
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A plugin SIGKILLed while a call is in flight: that call fails with an error naming the
/// source (the demo's `slow` is not annotated idempotent, so it is not re-sent), the next
/// call starts a new process and succeeds, and the admin API counts the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_mid_call_fails_that_call_naming_it_and_the_next_call_restarts_it() {
    let scratch = Scratch::new("killed");
    let config = write_config(&scratch, &toolyard_source("demo", "backoff_ms = 50"));
    let gateway = start_gateway(&config).await;
    let client = connect(&gateway).await;
    let (before, _) = call(&client, "demo__echo", json!({"message": "before"})).await;
    assert_eq!(before.as_deref(), Ok("before"));
    let upstream = descendants(gateway.pid());
    assert_eq!(upstream.len(), 1, "one upstream process: {upstream:?}");
    let victim = upstream[0].pid;
    assert!(
        upstream[0].cmdline.contains("serve --stdio"),
        "{upstream:?}"
    );
    assert_eq!(status(&gateway, "demo").await["health"]["restarts"], 0);

    let slow = tokio::spawn({
        let client = client.clone();
        async move { call(&client, "demo__slow", json!({"steps": 20, "delay_ms": 500})).await }
    });
    // The call is in flight once the gateway holds a lease for it.
    eventually("the slow call in flight", Duration::from_secs(10), || {
        let g = &gateway;
        async move { status(g, "demo").await["health"]["in_flight"] == 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill9(victim);
    let (killed, took) = tokio::time::timeout(Duration::from_secs(10), slow)
        .await
        .expect("the interrupted call ends promptly")
        .unwrap();
    let message = killed.expect_err("the interrupted call fails");
    assert!(
        message.contains("`demo`"),
        "the error names the source: {message}"
    );
    assert!(
        took < Duration::from_secs(9),
        "ended by the kill, not by the tool: {took:?}"
    );

    let (after, _) = call(&client, "demo__echo", json!({"message": "after"})).await;
    assert_eq!(
        after.as_deref(),
        Ok("after"),
        "the next call restarts the plugin"
    );
    let raw = client
        .call_tool("demo__echo", json!({"message": "meta"}))
        .await
        .unwrap();
    assert_eq!(raw.meta.unwrap()["io.toolyard/source"]["name"], "demo");
    let health = status(&gateway, "demo").await["health"].clone();
    assert_eq!(health["restarts"], 1, "{health}");
    assert_eq!(health["state"], "healthy", "{health}");
    let now = descendants(gateway.pid());
    let live: Vec<_> = now.iter().filter(|p| p.state != 'Z').collect();
    assert_eq!(
        live.len(),
        1,
        "one live upstream after the restart: {now:?}"
    );
    assert_ne!(live[0].pid, victim, "a new process");
    client.close().await;
}

/// A plugin that crashes on every start opens its circuit after `max_crashes` tries (and is
/// then left alone until a probe); a plugin that ran and then crashes for good does the
/// same, after which calls to its tools fail fast, and its tools leave the listing
/// (`failure_mode = "skip"`), calls to them then naming the unhealthy source rather than
/// an unknown tool; a healthy source keeps working throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_crashing_on_every_start_turns_unhealthy_fails_fast_and_leaves_the_listing() {
    let scratch = Scratch::new("crashing");
    let dead = scratch.dir("dead");
    let flaky = scratch.dir("flaky");
    std::fs::write(dead.join("fail"), "").unwrap();
    let supervision = "max_crashes = 2\nbackoff_ms = 50\nprobe_secs = 3600\ntimeout_ms = 20000";
    let config = write_config(
        &scratch,
        &format!(
            "{}{}{}",
            toolyard_source("good", ""),
            pool_source("dead", &dead, supervision),
            pool_source("flaky", &flaky, supervision)
        ),
    );
    let gateway = start_gateway(&config).await;

    // Crashing from the very first start: unhealthy after exactly max_crashes starts.
    eventually("`dead` unhealthy", Duration::from_secs(10), || {
        let g = &gateway;
        async move { status(g, "dead").await["health"]["state"] == "unhealthy" }
    })
    .await;
    let dead_status = status(&gateway, "dead").await;
    assert_eq!(dead_status["listed"], false, "{dead_status}");
    assert_eq!(
        dead_status["health"]["crashes_in_window"], 2,
        "{dead_status}"
    );
    assert!(
        dead_status["health"]["last_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{dead_status}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        lines(&dead.join("starts")).len(),
        2,
        "max_crashes = 2 starts, then no more until a probe"
    );

    let client = connect(&gateway).await;
    let tools = tool_names(&client).await.unwrap();
    assert!(tools.contains(&"good__echo".to_owned()), "{tools:?}");
    assert!(tools.contains(&"flaky__echo".to_owned()), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("dead__")), "{tools:?}");

    // `flaky` ran fine; from now on every start of it fails.
    std::fs::write(flaky.join("fail"), "").unwrap();
    let (crashed, _) = call(&client, "flaky__crash", json!({})).await;
    let message = crashed.expect_err("the crash fails the call");
    assert!(message.contains("`flaky`"), "{message}");
    let (restart, took) = call(&client, "flaky__echo", json!({"x": 1})).await;
    let message = restart.expect_err("the restart fails");
    assert!(message.contains("`flaky`"), "{message}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        status(&gateway, "flaky").await["health"]["state"],
        "unhealthy"
    );
    assert_eq!(
        lines(&flaky.join("starts")).len(),
        2,
        "the first start and one restart"
    );

    // Open circuit: fail fast, with the reason, well under the 20 s call timeout.
    let (fast, took) = call(&client, "flaky__echo", json!({"x": 2})).await;
    let message = fast.expect_err("an unhealthy source's call fails");
    assert!(took < Duration::from_secs(2), "fails fast: {took:?}");
    assert!(message.contains("flaky"), "{message}");
    eprintln!("an unhealthy source's call fails in {took:?} with: {message}");
    assert_eq!(
        lines(&flaky.join("starts")).len(),
        2,
        "nothing started for it"
    );

    // Skip: its tools leave the listing; the healthy source is untouched.
    eventually("`flaky` out of tools/list", Duration::from_secs(5), || {
        let c = &client;
        async move {
            !tool_names(c)
                .await
                .unwrap()
                .iter()
                .any(|t| t.starts_with("flaky__"))
        }
    })
    .await;
    let tools = tool_names(&client).await.unwrap();
    assert!(tools.contains(&"good__echo".to_owned()), "{tools:?}");
    let (unlisted, took) = call(&client, "flaky__echo", json!({"x": 3})).await;
    let message = unlisted.expect_err("an unlisted tool's call fails");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Not "Unknown tool": the caller learns which source is down and why.
    assert!(
        message.contains("source `flaky` is unhealthy") && !message.contains("Unknown tool"),
        "{message}"
    );
    // A tool no source has is still simply unknown.
    let (unknown, _) = call(&client, "nobody__echo", json!({})).await;
    eprintln!("an unlisted source's call fails in {took:?} with: {message}");
    let unknown = unknown.expect_err("an unknown tool's call fails");
    assert!(unknown.contains("Unknown tool"), "{unknown}");
    let (good, _) = call(&client, "good__echo", json!({"message": "still here"})).await;
    assert_eq!(good.as_deref(), Ok("still here"));
    assert_eq!(status(&gateway, "flaky").await["listed"], false);
    client.close().await;
}

/// `failure_mode = "fail"`: while the source is unhealthy, listings fail with an error
/// naming it (calls to other sources still work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_failure_mode_fail_an_unhealthy_source_fails_listings_naming_it() {
    let scratch = Scratch::new("fail-mode");
    let flaky = scratch.dir("flaky");
    let config = write_config(
        &scratch,
        &format!(
            "{}{}",
            toolyard_source("good", ""),
            pool_source(
                "flaky",
                &flaky,
                "max_crashes = 2\nbackoff_ms = 50\nprobe_secs = 3600\nfailure_mode = \"fail\""
            )
        ),
    );
    let gateway = start_gateway(&config).await;
    let client = connect(&gateway).await;
    assert!(tool_names(&client)
        .await
        .unwrap()
        .contains(&"flaky__echo".to_owned()));
    std::fs::write(flaky.join("fail"), "").unwrap();
    let _ = call(&client, "flaky__crash", json!({})).await;
    let _ = call(&client, "flaky__echo", json!({})).await;
    assert_eq!(
        status(&gateway, "flaky").await["health"]["state"],
        "unhealthy"
    );
    eventually("tools/list fails", Duration::from_secs(5), || {
        let c = &client;
        async move { tool_names(c).await.is_err() }
    })
    .await;
    let e = tool_names(&client).await.unwrap_err().to_string();
    assert!(
        e.contains("flaky"),
        "the listing error names the source: {e}"
    );
    let prompts = client.list_all_prompts().await;
    assert!(prompts.is_err(), "every listing fails: {prompts:?}");
    let (good, _) = call(&client, "good__echo", json!({"message": "calls go on"})).await;
    assert_eq!(good.as_deref(), Ok("calls go on"));
    client.close().await;
}

/// 200 calls through a `transient` source (a process per call, 8 at a time) leave no
/// process behind once they settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_transient_calls_leave_no_process_behind() {
    use futures_util::StreamExt;
    let scratch = Scratch::new("transient");
    let config = write_config(
        &scratch,
        &toolyard_source("once", "lifecycle = \"transient\""),
    );
    let gateway = start_gateway(&config).await;
    let root = gateway.pid();
    let client = connect(&gateway).await;
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = std::thread::spawn({
        let sampling = sampling.clone();
        move || {
            let mut most = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(descendants(root).len());
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        }
    });
    let results: Vec<_> = futures_util::stream::iter(0..200)
        .map(|i| {
            let client = client.clone();
            async move {
                (
                    i,
                    call(
                        &client,
                        "once__echo",
                        json!({"message": format!("call {i}")}),
                    )
                    .await
                    .0,
                )
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.join().unwrap();
    for (i, r) in &results {
        assert_eq!(r.as_deref(), Ok(format!("call {i}").as_str()));
    }
    assert!(most >= 1, "transient calls ran in processes of their own");
    eprintln!("at most {most} upstream processes at once during 200 transient calls");
    let mut left = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        left = descendants(root);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let health = status(&gateway, "once").await["health"].clone();
    assert_eq!(health["processes"], 0, "{health}");
    assert_eq!(health["in_flight"], 0, "{health}");
    assert_eq!(health["state"], "healthy", "{health}");
    client.close().await;
}

/// Runs `toolyard serve --config FILE --http 127.0.0.1:<free>` that is expected to exit by
/// itself; returns its success, stderr and how long it ran. Killed after 20 s.
fn serve_expecting_exit(config: &Path) -> (bool, String, Duration) {
    let started = Instant::now();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--http"])
        .arg(format!("127.0.0.1:{}", toolyard_testkit::free_port()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("GATEWAY_FAULTS_API_KEY");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TOOLYARD_") {
            cmd.env_remove(key);
        }
    }
    let (status, stderr) = crate::exit_within(
        cmd.spawn().unwrap(),
        Duration::from_secs(20),
        &format!("toolyard serve --config {}", config.display()),
    );
    (status.success(), stderr, started.elapsed())
}

/// A remote source that is down: with `skip` the gateway starts at once without it (no wait
/// for the startup timeout) and reports why; with `fail` `toolyard serve` exits non-zero at
/// once naming it; a remote that goes down under a running gateway fails calls fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_is_down_fails_fast() {
    let scratch = Scratch::new("remote");
    let closed = toolyard_testkit::ClosedPort::new();
    let down = format!("http://127.0.0.1:{}/mcp", closed.port());
    let remote = |name: &str, url: &str, extra: &str| {
        format!(
            "[[sources]]\nname = {}\nurl = {}\nstartup_timeout_ms = 20000\ntimeout_ms = 20000\nmax_crashes = 2\nbackoff_ms = 50\nprobe_secs = 3600\n{extra}\n",
            q(name),
            q(url)
        )
    };
    // skip: the gateway serves without it.
    let config = write_config(
        &scratch,
        &format!(
            "{}{}",
            toolyard_source("good", ""),
            remote("down", &down, "")
        ),
    );
    let started = Instant::now();
    let gateway = start_gateway(&config).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "no wait for the startup timeout: {took:?}"
    );
    let client = connect(&gateway).await;
    let tools = tool_names(&client).await.unwrap();
    assert!(!tools.iter().any(|t| t.starts_with("down__")), "{tools:?}");
    let (good, _) = call(&client, "good__echo", json!({"message": "up"})).await;
    assert_eq!(good.as_deref(), Ok("up"));
    eventually("`down` unhealthy", Duration::from_secs(5), || {
        let g = &gateway;
        async move { status(g, "down").await["health"]["state"] == "unhealthy" }
    })
    .await;
    let down_status = status(&gateway, "down").await;
    let error = down_status["health"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!error.is_empty(), "{down_status}");
    eprintln!("a remote on a closed port: {error}");
    client.close().await;
    drop(gateway);

    // fail: serve refuses to start, naming the source, at once.
    let config = write_config(
        &scratch,
        &format!(
            "{}{}",
            toolyard_source("good", ""),
            remote("down", &down, "failure_mode = \"fail\"")
        ),
    );
    let (ok, stderr, took) = serve_expecting_exit(&config);
    assert!(!ok, "serve exits non-zero; stderr:\n{stderr}");
    assert!(stderr.contains("`down`"), "{stderr}");
    assert!(took < Duration::from_secs(5), "{took:?}");

    // A remote that goes away under a running gateway.
    let upstream = tokio::task::spawn_blocking(|| Process::start(bin(), &["serve"]))
        .await
        .unwrap();
    let config = write_config(
        &scratch,
        &format!(
            "{}{}",
            toolyard_source("good", ""),
            remote("web", &upstream.url(), "")
        ),
    );
    let gateway = start_gateway(&config).await;
    let client = connect(&gateway).await;
    let (up, _) = call(&client, "web__echo", json!({"message": "remote"})).await;
    assert_eq!(up.as_deref(), Ok("remote"));
    drop(upstream);
    for attempt in 0..3 {
        let (gone, took) = call(&client, "web__echo", json!({"message": "gone"})).await;
        let message = gone.expect_err("a call to a remote that is down fails");
        assert!(message.contains("`web`"), "attempt {attempt}: {message}");
        assert!(
            took < Duration::from_secs(3),
            "attempt {attempt} fails fast: {took:?}"
        );
        eprintln!("remote down, call {attempt}: {took:?}: {message}");
    }
    let (good, _) = call(&client, "good__echo", json!({"message": "up"})).await;
    assert_eq!(good.as_deref(), Ok("up"));
    client.close().await;
}

/// Manifest and command problems stop `toolyard serve --config` with a non-zero exit and
/// an error naming the source and the problem; several are reported at once.
#[test]
fn manifest_problems_stop_serve_with_a_clear_error() {
    let scratch = Scratch::new("manifests");
    let plugins = fixtures().join("gateway_faults");
    let plugin = |name: &str, dir: &str| {
        format!(
            "[[sources]]\nname = {}\nplugin = {}\n",
            q(name),
            q(plugins.join(dir).to_str().unwrap())
        )
    };
    let cases = [
        (
            plugin("keyless", "needs-env"),
            vec![
                "source `keyless`",
                "required environment variable `GATEWAY_FAULTS_API_KEY` has no value",
            ],
        ),
        (
            plugin("missing", "bad-command"),
            vec![
                "source `missing`",
                "command `toolyard-fault-no-such-command` not found",
            ],
        ),
        (
            "[[sources]]\nname = \"typo\"\ncommand = \"toolyard-fault-no-such-command\"\n"
                .to_owned(),
            vec![
                "source `typo`",
                "command `toolyard-fault-no-such-command` not found",
            ],
        ),
        (
            plugin("broken", "malformed"),
            vec![
                "source `broken`",
                "malformed plugin manifest",
                "malformed/plugin.json:5:55",
            ],
        ),
    ];
    for (body, expected) in &cases {
        let config = write_config(&scratch, body);
        let (ok, stderr, _) = serve_expecting_exit(&config);
        assert!(!ok, "serve must fail for:\n{body}\nstderr:\n{stderr}");
        for e in expected {
            assert!(stderr.contains(e), "expected {e:?} in:\n{stderr}");
        }
    }
    // Every problem at once.
    let all: String = cases.iter().map(|(b, _)| format!("{b}\n")).collect();
    let config = write_config(&scratch, &all);
    let (ok, stderr, _) = serve_expecting_exit(&config);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("4 problems with sources"), "{stderr}");
    for (_, expected) in &cases {
        for e in expected {
            assert!(stderr.contains(e), "expected {e:?} in:\n{stderr}");
        }
    }
}

/// An upstream that dies mid-call: a tool without read-only/idempotent annotations reached
/// the upstream once and is not re-sent (its caller gets the error); a `readOnlyHint` tool
/// is retried once, on a restarted process, and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_read_only_or_idempotent_tools_are_retried_after_the_upstream_dies() {
    let scratch = Scratch::new("retry");
    let state = scratch.dir("once");
    let script = fixtures().join("gateway_faults/once_server.py");
    let config = write_config(
        &scratch,
        &format!(
            "[[sources]]\nname = \"once\"\ncommand = {}\nargs = [{}, {}]\nbackoff_ms = 50\n",
            q(python()),
            q(script.to_str().unwrap()),
            q(state.to_str().unwrap())
        ),
    );
    let gateway = start_gateway(&config).await;
    let client = connect(&gateway).await;
    let tools = client.list_all_tools().await.unwrap();
    let read_it = tools.iter().find(|t| t.name == "once__read_it").unwrap();
    assert_eq!(
        read_it.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true),
        "annotations pass through"
    );
    let calls = state.join("calls");
    let count = |tool: &str| lines(&calls).iter().filter(|l| *l == tool).count();

    let (write, _) = call(&client, "once__write_once", json!({})).await;
    let message = write.expect_err("the non-idempotent call is not retried");
    assert!(message.contains("`once`"), "{message}");
    assert_eq!(count("write_once"), 1, "sent exactly once");

    let (read, _) = call(&client, "once__read_it", json!({})).await;
    let text = read.expect("the read-only call is retried and succeeds");
    assert!(text.starts_with("read_it done by"), "{text}");
    assert_eq!(count("read_it"), 2, "the first attempt and one retry");

    // The next write goes through: the failed one really was sent only once.
    let (write, _) = call(&client, "once__write_once", json!({})).await;
    assert!(write.is_ok(), "{write:?}");
    assert_eq!(count("write_once"), 2);
    assert_eq!(status(&gateway, "once").await["health"]["restarts"], 2);
    client.close().await;
}

/// `toolyard serve --stdio --config` ended by SIGTERM (how supervisors and load generators
/// stop a stdio server) stops its sources like stdin EOF does, even an upstream that ignores
/// EOF and SIGTERM (regression: it used to die by the signal's default action, orphaning it).
#[test]
fn sigterm_on_a_stdio_gateway_stops_its_sources() {
    let scratch = Scratch::new("sigterm");
    let script = fixtures().join("fault_server.py");
    let config = write_config(
        &scratch,
        &format!(
            "[[sources]]\nname = \"stubborn\"\ncommand = {}\nargs = [{}, \"ignore-sigterm\"]\n",
            q(python()),
            q(script.to_str().unwrap())
        ),
    );
    let mut gateway = Command::new(bin())
        .args(["serve", "--stdio", "--config", config.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // The gateway answers once its sources are added (the upstream's handshake is over).
    let mut stdin = gateway.stdin.take().unwrap();
    {
        use std::io::{BufRead, Write};
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}})
        )
        .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(gateway.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"result\""), "{line}");
    }
    let upstream = descendants(gateway.id())
        .into_iter()
        .find(|p| p.cmdline.contains("ignore-sigterm"))
        .expect("the upstream runs")
        .pid;
    let status = Command::new("kill")
        .args(["-TERM", &gateway.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = gateway.wait();
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with(|c| c != 'Z')))
            .unwrap_or(false)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(upstream) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let orphaned = alive(upstream);
    if orphaned {
        kill9(upstream);
    }
    assert!(
        !orphaned,
        "upstream {upstream} outlived the gateway's SIGTERM"
    );
}

/// Kills a process with SIGKILL when dropped (a test that fails must not leave it behind).
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Alive and not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|s| s != "Z")
        })
        .unwrap_or(false)
}

/// A gateway killed with SIGKILL runs no clean-up, and an upstream that ignores both the
/// end of its stdin and SIGTERM (here a shell with SIGTERM ignored that goes on to `sleep`
/// once its `toolyard serve --stdio` ends) used to run on as an orphan. The gateway's
/// watchdog sees the gateway's end and stops the upstream's whole process group (SIGTERM,
/// then SIGKILL after its grace period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_outright_leaves_no_upstream_running() {
    let scratch = Scratch::new("orphans");
    let pidfile = scratch.path("upstream.pid");
    let script = format!(
        "trap '' TERM; echo $$ > '{}'; '{}' serve --stdio; exec sleep 300",
        pidfile.display(),
        bin()
    );
    let config = write_config(
        &scratch,
        &format!(
            "[[sources]]\nname = \"stubborn\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n",
            q(&script)
        ),
    );
    let gateway = start_gateway(&config).await;
    let client = connect(&gateway).await;
    let (echoed, _) = call(&client, "stubborn__echo", json!({"message": "hi"})).await;
    assert_eq!(echoed.as_deref(), Ok("hi"));
    let upstream: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(upstream);
    assert!(running(upstream));
    let everything = all_descendants(gateway.pid());
    assert_eq!(
        everything.iter().filter(|p| is_watchdog(p)).count(),
        1,
        "one watchdog: {everything:?}"
    );
    client.close().await;
    kill9(gateway.pid());
    eventually(
        "the orphaned upstream is stopped",
        Duration::from_secs(20),
        || async { !running(upstream) },
    )
    .await;
}

/// A source that cannot start (failure mode `skip`) is listed as down in `/readyz` (the
/// lifecycle's component events), without making the gateway unready: its other sources
/// still serve.
#[tokio::test]
async fn readyz_lists_a_source_that_is_down_and_stays_ready_for_a_skip_source() {
    let scratch = Scratch::new("readyz-down");
    let config = write_config(
        &scratch,
        &format!(
            "{}\n[[sources]]\nname = \"broken\"\ncommand = \"false\"\nstartup_timeout_ms = 2000\n",
            toolyard_source("ok", "")
        ),
    );
    let gateway = start_gateway(&config).await;
    let response = reqwest::Client::new()
        .get(format!("{}/readyz", gateway.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let down = body["down"].as_array().expect("a down list");
    assert!(
        down.iter()
            .any(|d| d["kind"] == "source" && d["name"] == "broken" && d["required"] == false),
        "{body}"
    );
    assert!(!down.iter().any(|d| d["name"] == "ok"), "{body}");
}
