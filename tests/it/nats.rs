//! The NATS bridge through the binary: `toolyard worker` processes on a real nats-server
//! (installed by scripts/install-test-deps), `toolyard serve --nats` in front of them, and a
//! plain NATS client that is not ours (nats-py, tests/interop/nats_client.py) calling a
//! worker by following docs/nats.md alone.

use crate::oauth_http::{
    answered_over_http, bearer_for, call_over_http, listed_over_http, oauth_server,
};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolyard_testkit::{cache, repo, NatsServer};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

/// A `toolyard` process (a worker, or any other), killed when dropped.
pub(crate) struct WorkerProcess(pub(crate) Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(url: &str, name: &str) -> WorkerProcess {
    WorkerProcess(spawn_worker(
        &["--nats", url, "--name", name],
        Stdio::inherit(),
    ))
}

/// `toolyard worker ARGS...`, its stderr to `stderr`; the environment's NATS URL and log
/// filter left out, so only ARGS say where it serves and what it logs.
pub(crate) fn spawn_worker(args: &[&str], stderr: Stdio) -> Child {
    Command::new(BIN)
        .arg("worker")
        .args(args)
        .env_remove("TOOLYARD_NATS")
        .env_remove("TOOLYARD_LOG")
        .env_remove("TOOLYARD_STATE_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start toolyard worker")
}

/// `toolyard client --stdio "toolyard serve --stdio --nats URL" ARGS...`, retried until the
/// gateway sees the worker (it starts in parallel), as JSON.
fn through_gateway(url: &str, args: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    through_gateway_with(url, "", args, done)
}

/// [`through_gateway`], `serve_flags` (shell words) added to the gateway's command line.
pub(crate) fn through_gateway_with(
    url: &str,
    serve_flags: &str,
    args: &[&str],
    done: impl Fn(&Value) -> bool,
) -> Value {
    let serve = format!("'{BIN}' serve --stdio --nats {url} {serve_flags}");
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

/// `tests/interop/nats_client.py` (nats-py) calling `calc`'s `tool` with `arguments` (and
/// `flags`), retried until the worker answers (it starts in parallel); its output.
fn nats_client(url: &str, tool: &str, arguments: &Value, flags: &[&str]) -> Value {
    let python = cache().join("venv/bin/python");
    let script = repo().join("tests/interop/nats_client.py");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(&python)
            .arg(&script)
            .args([url, "calc", tool, &arguments.to_string()])
            .args(flags)
            .output()
            .expect("run nats_client.py (scripts/install-test-deps installs nats-py)");
        if out.status.success() {
            return serde_json::from_slice::<Value>(&out.stdout).unwrap();
        }
        // The worker may not be subscribed yet: no responders.
        assert!(
            Instant::now() < deadline,
            "nats_client.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_plain_nats_client_calls_a_worker_by_the_documented_wire() {
    let nats = NatsServer::start();
    let _w = worker(&nats.url(), "calc");
    let answer = nats_client(&nats.url(), "add", &json!({"a": 2, "b": 3}), &[]);
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

/// The plain client's `add` of 4 and 5 ended with an `end` frame saying 9.
fn assert_added_four_and_five(answer: &Value) {
    let last = &answer["frames"].as_array().unwrap().last().unwrap();
    assert_eq!(last["frame"], "end", "{answer}");
    let text = last["body"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains('9'), "4 + 5: {answer}");
}

/// The same plain client calls a tenant's pool by putting the tenant in the subject, as
/// docs/nats.md's "Scoped pools" says (that the pool takes no unattributed call is
/// `scopes::each_gateway_lists_and_calls_only_the_pools_that_take_its_tenant_and_user`).
#[test]
fn a_plain_nats_client_calls_a_tenants_pool_with_the_tenant_in_its_subject() {
    let nats = NatsServer::start();
    let _w = ready_worker_with(&nats.url(), "calc", &["--nats-tenant", "acme"]);
    let answer = nats_client(
        &nats.url(),
        "add",
        &json!({"a": 4, "b": 5}),
        &["--tenant", "acme"],
    );
    assert_added_four_and_five(&answer);
}

/// The same plain client calls for a principal by docs/nats.md's "The caller's principal"
/// alone: `Mcp-Principal`, and the principal's token (computed in Python from the docs'
/// rule) as the subject's user token, which the worker takes; the same header on another
/// user's subject is a header mismatch naming it. (That the tool sees the principal is
/// `principals::a_workers_tool_sees_the_gateways_caller_as_its_principal_on_every_round`.)
#[test]
fn a_plain_nats_client_calls_for_a_principal_with_its_token_as_the_subjects_user() {
    let nats = NatsServer::start();
    let _w = worker(&nats.url(), "calc");
    let principal = ["--principal", "alice@example.com"];
    let answer = nats_client(&nats.url(), "add", &json!({"a": 4, "b": 5}), &principal);
    assert_added_four_and_five(&answer);
    let forged = nats_client(
        &nats.url(),
        "add",
        &json!({"a": 4, "b": 5}),
        &[principal[0], principal[1], "--user", "bob"],
    );
    let last = forged["frames"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["frame"], "err", "{forged}");
    assert_eq!(last["body"]["error"]["code"], -32020, "{forged}");
    let message = last["body"]["error"]["message"].as_str().unwrap();
    assert!(message.contains("Mcp-Principal"), "{message}");
}

/// End to end through the binaries: a caller the gateway's OAuth authenticated (a bearer
/// token `serve --oauth-*` verifies) is who a `toolyard worker`'s tool sees, the demo
/// `whoami` (HTTP → `serve --nats` → the bus → the worker process), and an anonymous one
/// is refused at the gateway (401), never sent on as someone.
#[test]
fn a_workers_tool_sees_the_principal_the_gateways_oauth_authenticated() {
    let nats = NatsServer::start();
    let _w = ready_worker_with(&nats.url(), "calc", &[]);
    let gateway = oauth_server(&["--nats", &nats.url()]);
    let url = format!("{}/mcp", gateway.base_url());
    let result = answered_over_http(&url, "calc__whoami", &bearer_for("alice@example.com"));
    assert_eq!(
        result["content"][0]["text"], "alice@example.com",
        "{result}"
    );
    assert_eq!(call_over_http(&url, "calc__whoami", None).0, 401);
}

/// An item for listed principals in a worker's config crosses the bus: the gateway (with
/// OAuth in front) lists and serves it to those principals' bearers alone, and the worker,
/// hearing who calls, checks again.
#[test]
fn a_workers_config_items_for_principals_reach_their_bearers_alone_through_the_gateway() {
    let nats = NatsServer::start();
    let dir = std::env::temp_dir().join(format!("toolyard-it-hidden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("desk.toml");
    std::fs::write(
        &config,
        "[[tools]]\nname = \"open\"\ndescription = \"For all\"\ntext = \"open\"\n\n\
         [[tools]]\nname = \"secret\"\ndescription = \"For alice\"\ntext = \"hers\"\n\
         audience = [\"alice@example.com\"]\n",
    )
    .unwrap();
    let url = nats.url();
    let _worker = ready_worker_with(
        &url,
        "desk",
        &["--no-demo", "--config", &config.to_string_lossy()],
    );
    let gateway = oauth_server(&["--nats", &url]);
    let url = format!("{}/mcp", gateway.base_url());
    let (alice, bob) = (
        bearer_for("alice@example.com"),
        bearer_for("bob@example.com"),
    );
    let answered = answered_over_http(&url, "desk__secret", &alice);
    assert_eq!(answered["content"][0]["text"], "hers");
    let hers = listed_over_http(&url, &alice);
    assert!(
        hers.contains(&"desk__open".to_owned()) && hers.contains(&"desk__secret".to_owned()),
        "{hers:?}"
    );
    let his = listed_over_http(&url, &bob);
    assert!(his.contains(&"desk__open".to_owned()), "{his:?}");
    assert!(!his.contains(&"desk__secret".to_owned()), "{his:?}");
    let (_, refused) = call_over_http(&url, "desk__secret", Some(&bob));
    assert_eq!(
        refused["error"]["message"], "Unknown tool: desk__secret",
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `owner`'s own pool of `desk` (tenant acme, principal `OWNER@example.com`) serving the
/// config file `tools`, written into `dir`.
fn desk_of(nats_url: &str, dir: &std::path::Path, owner: &str, tools: &str) -> WorkerProcess {
    let config = dir.join(format!("{owner}.toml"));
    std::fs::write(&config, tools).unwrap();
    let (config, principal) = (config.to_string_lossy(), format!("{owner}@example.com"));
    let args = [
        "--config",
        &config,
        "--nats-tenant",
        "acme",
        "--nats-principal",
        &principal,
    ];
    ready_worker_with(nats_url, "desk", &args)
}

/// A `serve --nats` of tenant acme serving each caller its own user pool, OAuth in front
/// (its config written into `dir`): the process and its MCP endpoint.
fn user_pools_gateway(
    nats_url: &str,
    dir: &std::path::Path,
) -> (toolyard_testkit::ServerProcess, String) {
    let config = dir.join("gateway.toml");
    std::fs::write(&config, "[nats]\ntenant = \"acme\"\nuser_pools = true\n").unwrap();
    let gateway = oauth_server(&["--nats", nats_url, "--config", &config.to_string_lossy()]);
    let url = format!("{}/mcp", gateway.base_url());
    (gateway, url)
}

/// A `subscriptions/listen` stream over HTTP as `bearer`'s principal, for tool list changes,
/// its acknowledgement read.
async fn tools_listen_over_http(url: &str, bearer: &str) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut stream = reqwest::Client::new()
        .post(url)
        .bearer_auth(bearer)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let ack = next_sse_message(&mut stream, Duration::from_secs(10)).await;
    let method = ack.as_ref().map(|a| a["method"].clone());
    assert_eq!(
        method,
        Some(json!("notifications/subscriptions/acknowledged")),
        "{ack:?}"
    );
    stream
}

/// The next message on an event stream within `within` (none: nothing came).
async fn next_sse_message(stream: &mut reqwest::Response, within: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    let mut text = String::new();
    loop {
        if let Some(end) = text.find("\n\n") {
            let event = &text[..end];
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                return Some(serde_json::from_str(data.trim()).unwrap());
            }
            text.drain(..end + 2);
            continue;
        }
        let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await;
        text.push_str(&String::from_utf8_lossy(&chunk.ok()?.ok()??));
    }
}

/// A user's own desk starting behind a `user_pools` gateway, through the binaries and over
/// HTTP with bearer tokens: the listen stream of its owner is told the tools changed, another
/// user's hears nothing of it, until that user's own desk starts.
#[test]
fn a_users_desk_starting_is_news_to_that_users_listen_stream_alone() {
    let nats = NatsServer::start();
    let dir = crate::client_interop::TempDir::new("desk-news");
    let notes = |owner: &str| {
        format!("[[tools]]\nname = \"{owner}_notes\"\ndescription = \"Notes\"\ntext = \"notes\"\n")
    };
    let desk = |owner: &str| desk_of(&nats.url(), dir.path(), owner, &notes(owner));
    let (_gateway, url) = user_pools_gateway(&nats.url(), dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (alice, bob) = (
        bearer_for("alice@example.com"),
        bearer_for("bob@example.com"),
    );
    let mut alice_hears = runtime.block_on(tools_listen_over_http(&url, &alice));
    let mut bob_hears = runtime.block_on(tools_listen_over_http(&url, &bob));
    let told = |stream: &mut reqwest::Response, within: u64| {
        let next = next_sse_message(stream, Duration::from_secs(within));
        runtime.block_on(next).map(|n| n["method"].clone())
    };
    let changed = Some(json!("notifications/tools/list_changed"));

    let _alice_desk = desk("alice");
    assert_eq!(told(&mut alice_hears, 10), changed, "alice's desk came");
    assert_eq!(told(&mut bob_hears, 1), None, "bob heard of alice's desk");
    let _bob_desk = desk("bob");
    assert_eq!(told(&mut bob_hears, 10), changed, "bob's desk came");
    assert_eq!(told(&mut alice_hears, 1), None, "alice heard of bob's desk");
}

/// Each user's own pool through the binaries: `toolyard worker --nats-tenant acme
/// --nats-principal P` for alice and for bob (one server, `desk`, each with a `[[tools]]`
/// saying whose it is) behind one `serve --nats` whose `[nats]` names tenant acme and
/// `user_pools`, OAuth in front: each user's bearer is listed its own desk's tools alone and
/// reaches its own desk, where `whoami` sees its principal; to carol, who has no desk, and to
/// alice for bob's own tool, the tools are unknown.
#[test]
fn each_users_bearer_reaches_its_own_desk_through_the_binaries() {
    let nats = NatsServer::start();
    let dir = crate::client_interop::TempDir::new("desks");
    let desk = |owner: &str| {
        let tools = format!("[[tools]]\nname = \"owner\"\ndescription = \"Whose desk\"\ntext = \"{owner}'s desk\"\n\n[[tools]]\nname = \"{owner}_notes\"\ndescription = \"Notes\"\ntext = \"{owner}'s notes\"\n");
        desk_of(&nats.url(), dir.path(), owner, &tools)
    };
    let (_alice, _bob) = (desk("alice"), desk("bob"));
    let (_gateway, url) = user_pools_gateway(&nats.url(), dir.path());
    for owner in ["alice", "bob"] {
        let bearer = bearer_for(&format!("{owner}@example.com"));
        let result = answered_over_http(&url, "desk__owner", &bearer);
        assert_eq!(
            result["content"][0]["text"],
            format!("{owner}'s desk"),
            "{result}"
        );
        let result = answered_over_http(&url, "desk__whoami", &bearer);
        assert_eq!(
            result["content"][0]["text"],
            format!("{owner}@example.com"),
            "{result}"
        );
        let desk: Vec<String> = listed_over_http(&url, &bearer)
            .into_iter()
            .filter(|t| t.starts_with("desk__"))
            .collect();
        let own = format!("desk__{owner}_notes");
        assert!(desk.contains(&own), "{owner}: {desk:?}");
        assert!(
            desk.iter().all(|t| !t.ends_with("_notes") || *t == own),
            "{owner}: {desk:?}"
        );
    }
    let (carol, alice) = (
        bearer_for("carol@example.com"),
        bearer_for("alice@example.com"),
    );
    for (bearer, tool) in [(&carol, "desk__owner"), (&alice, "desk__bob_notes")] {
        let (status, answer) = call_over_http(&url, tool, Some(bearer));
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["error"]["message"],
            format!("Unknown tool: {tool}"),
            "{answer}"
        );
    }
    assert!(listed_over_http(&url, &carol)
        .iter()
        .all(|t| !t.starts_with("desk__")));

    // User pools without a tenant are refused before the bus: nothing listens on port 1.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[nats]\nuser_pools = true\n").unwrap();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--stdio",
            "--nats",
            "nats://127.0.0.1:1",
            "--config",
        ])
        .arg(&bad)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stderr) = crate::exit_within(child, Duration::from_secs(10), "serve");
    assert!(
        !status.success() && stderr.contains("user_pools needs the gateway's tenant"),
        "{status:?}: {stderr}"
    );
}

/// The same plain client with a request and an answer too large for the bus (a broker whose
/// `max_payload` is 64 KiB): both travel through claims in the `TY_CLAIMS` object store, as
/// docs/nats.md says (`Mcp-Body-Claim`, `Mcp-Accept-Claim`, `Mcp-Claim`).
#[test]
fn a_plain_nats_client_sends_and_gets_oversize_bodies_through_claims() {
    let nats = NatsServer::start_with_max_payload(64 * 1024);
    let _w = worker(&nats.url(), "calc");
    let message = "m".repeat(100_000);
    let answer = nats_client(
        &nats.url(),
        "echo",
        &json!({ "message": message }),
        &["--claims"],
    );
    let frames = answer["frames"].as_array().unwrap();
    let last = frames.last().unwrap();
    assert_eq!(last["frame"], "end", "{}", last["body"]["error"]);
    assert_eq!(last["claimed"], true, "the answer came through a claim");
    assert_eq!(last["body"]["id"], "py-1");
    assert_eq!(
        last["body"]["result"]["content"][0]["text"].as_str(),
        Some(message.as_str()),
        "the whole message, echoed"
    );
}

/// `toolyard worker --notification-backlog 4` in front of an upstream that floods progress
/// (a gateway source, `tests/fixtures/fault_server.py progress-flood`: 2 000 reports written
/// with the answer in one go, relayed by the one-thread worker as fast as it reads them):
/// at most 4 reports wait in the worker to be published, newer ones are dropped. A plain
/// NATS client still gets the answer and an unbroken `Mcp-Seq`; the worker says it drops
/// some, and how many once the request ends: what came plus what it dropped is every report
/// the upstream made, so none is lost unsaid. (The crate test pins the default, 512, with a
/// tool in the worker's own process.)
#[test]
fn a_worker_given_a_notification_backlog_drops_a_progress_flood_beyond_it_and_says_how_many() {
    let nats = NatsServer::start();
    let url = nats.url();
    let dir =
        std::env::temp_dir().join(format!("toolyard-it-worker-backlog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("worker.toml");
    let fixture = repo().join("tests/fixtures/fault_server.py");
    std::fs::write(
        &config,
        format!(
            "[[sources]]\nname = \"up\"\ncommand = \"python3\"\nargs = [\"-S\", {:?}, \"progress-flood\"]\n",
            fixture.to_string_lossy()
        ),
    )
    .unwrap();
    let mut child = spawn_worker(
        &[
            "--nats",
            &url,
            "--name",
            "calc",
            "--config",
            &config.to_string_lossy(),
            "--workers",
            "1",
            "--notification-backlog",
            "4",
        ],
        Stdio::piped(),
    );
    let stderr = StderrLines::of(&mut child);
    let _worker = WorkerProcess(child);
    stderr.wait_for("serving on");
    let reports = 2000;
    let answer = nats_client(&url, "up__echo", &json!({ "reports": reports }), &[]);
    let frames = answer["frames"].as_array().unwrap();
    let last = frames.last().unwrap();
    assert_eq!(last["frame"], "end", "{last}");
    let echoed: Value = serde_json::from_str(
        last["body"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(echoed, json!({ "reports": reports }), "{last}");
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["seq"], i, "frames are numbered without gaps");
    }
    let progress: Vec<f64> = frames
        .iter()
        .filter(|f| f["frame"] == "msg")
        .map(|f| {
            assert_eq!(f["body"]["method"], "notifications/progress", "{f}");
            f["body"]["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    // Each time the worker's reader yields, the publisher takes what waits (at most 4): a
    // few dozen turns over 2 000 lines at most. The default backlog would have kept 512.
    assert!(
        !progress.is_empty() && progress.len() < 256,
        "a few reports came and the rest were dropped: {} came",
        progress.len()
    );
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "the reports that came are in order: {progress:?}"
    );
    stderr.wait_for("dropping new ones until it catches up");
    let count = stderr.wait_for("notifications of a request dropped");
    let dropped: usize = count
        .split("dropped=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {count:?}"));
    assert_eq!(
        progress.len() + dropped,
        reports,
        "every report either came or was counted as dropped"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `toolyard worker` process that has subscribed (it said so on stderr); the rest of its
/// stderr is passed on.
pub(crate) fn ready_worker(url: &str, name: &str) -> WorkerProcess {
    ready_worker_with(url, name, &[])
}

/// [`ready_worker`] with more arguments.
pub(crate) fn ready_worker_with(url: &str, name: &str, more: &[&str]) -> WorkerProcess {
    use std::io::BufRead;
    let args = [&["--nats", url, "--name", name][..], more].concat();
    let mut child = spawn_worker(&args, Stdio::piped());
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let process = WorkerProcess(child);
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("serving on") => break,
            Some(Ok(line)) => eprintln!("{line}"),
            _ => panic!("the worker exited before it served"),
        }
    }
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("{line}");
        }
    });
    process
}

/// What a fault test sees of a call: its progress, then its outcome.
const INACTIVITY: Duration = Duration::from_secs(3);

/// A gateway in this process (its inactivity deadline shortened to [`INACTIVITY`]) and a
/// client of it.
struct Gateway {
    _remote: toolyard_nats::RemoteTools,
    client: toolyard::client::Client,
}

async fn gateway(url: &str) -> Gateway {
    gateway_with(url, INACTIVITY).await
}

/// [`gateway`] with another inactivity deadline.
async fn gateway_with(url: &str, inactivity: Duration) -> Gateway {
    use toolyard::client::{ClientBuilder, ProtocolChoice};
    let server = toolyard::ServerBuilder::new("gateway", "1.0")
        .list_settings(toolyard::ListSettings {
            ttl_ms: 0,
            ..toolyard::ListSettings::default()
        })
        .start()
        .await
        .unwrap();
    let bus = toolyard_nats::connect(url, "test-gateway").await.unwrap();
    let config = toolyard_nats::RemoteConfig {
        inactivity,
        ..toolyard_nats::RemoteConfig::default()
    };
    let remote = toolyard_nats::RemoteTools::start(server.clone(), bus, config)
        .await
        .unwrap();
    let client = ClientBuilder::new(toolyard::proto::Implementation::new("nats-test", "1.0"))
        .protocol(ProtocolChoice::Auto)
        .request_timeout(Duration::from_secs(60))
        .connect(toolyard::MemoryTransport::new(&server))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .any(|t| t.name == "pool__slow")
    {
        assert!(
            Instant::now() < deadline,
            "the gateway never saw the worker"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Gateway {
        _remote: remote,
        client,
    }
}

type Outcome = Result<toolyard::proto::CallToolResult, toolyard::client::ClientError>;

/// Starts a long `slow` call with progress (a frame every 100 ms) and returns once the
/// worker reported its first step, with the call's task.
async fn slow_call_in_flight(
    client: &toolyard::client::Client,
) -> tokio::task::JoinHandle<Outcome> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let opts = toolyard::client::RequestOptions::default().on_progress(move |_| {
        let _ = tx.send(());
    });
    let client = client.clone();
    let call = tokio::spawn(async move {
        client
            .call_tool_with("pool__slow", json!({"steps": 600, "delay_ms": 100}), &opts)
            .await
    });
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the slow call reports progress")
        .expect("progress");
    call
}

/// Waits for a call's end (bounded: the inactivity deadline plus a margin for a loaded
/// machine) and returns its JSON-RPC error code.
async fn error_code(call: tokio::task::JoinHandle<Outcome>) -> i32 {
    let outcome = tokio::time::timeout(INACTIVITY + Duration::from_secs(7), call)
        .await
        .expect("the call ends within its inactivity deadline, no hang")
        .unwrap();
    match outcome {
        Err(e) => e
            .rpc()
            .map_or_else(|| panic!("not a JSON-RPC error: {e}"), |o| o.code),
        Ok(r) => panic!("answered: {r:?}"),
    }
}

async fn echo(client: &toolyard::client::Client, message: &str) -> String {
    let r = client
        .call_tool("pool__echo", json!({ "message": message }))
        .await
        .unwrap();
    r.content
        .iter()
        .filter_map(|c| match c {
            toolyard::proto::ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

/// N1: the worker serving a call is SIGKILLed: the caller gets -32010 once the gateway sees
/// that nothing listens for the call's cancellation any more (two seconds of silence, then
/// a "no responders"), not at its inactivity deadline, not a hang; the next call is served
/// by the other worker. The killed worker runs on one thread (`--workers 1`: a
/// current-thread runtime), the survivor on the default two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_call_is_32010_long_before_the_inactivity_deadline_and_the_survivor_serves_the_next_call(
) {
    let nats = NatsServer::start();
    let url = nats.url();
    let first =
        tokio::task::spawn_blocking(move || ready_worker_with(&url, "pool", &["--workers", "1"]))
            .await
            .unwrap();
    // A minute of silence would be needed to give up on the call; its worker is gone sooner.
    let gw = gateway_with(&nats.url(), Duration::from_secs(60)).await;
    // The call goes to the only worker; then the second one joins the queue group.
    let call = slow_call_in_flight(&gw.client).await;
    let url = nats.url();
    let _survivor = tokio::task::spawn_blocking(move || ready_worker(&url, "pool"))
        .await
        .unwrap();
    drop(first); // SIGKILL
    let started = Instant::now();
    assert_eq!(error_code(call).await, -32010);
    // Two seconds of silence, then the check that nothing listens for the call any more.
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    // The killed worker's subscription went with its connection: the survivor answers.
    assert_eq!(echo(&gw.client, "survived").await, "survived");
}

/// N1, for calls that had no frame of their own: a worker with one slot runs a call and
/// holds a second one that waits for the slot. SIGKILLed, the running call is -32010 within
/// seconds, not at the minute-long inactivity deadline (its first keepalive came after
/// 100 ms, so the gateway can ask whether anything still listens), and the waiting call,
/// which its worker said was waiting (`Mcp-State: waiting`) and never said was running, is
/// sent again and answered by the survivor, although its tool is neither read-only nor
/// idempotent: it never ran. (Before, a waiting call stayed silent in the worker's
/// subscription and waited out the deadline; then it was -32010 like the running one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_killed_workers_slot_is_sent_again_to_the_survivor_and_the_running_one_is_32010(
) {
    let nats = NatsServer::start();
    let url = nats.url();
    let worker = tokio::task::spawn_blocking(move || {
        ready_worker_with(&url, "pool", &["--concurrency", "1"])
    })
    .await
    .unwrap();
    let gw = gateway_with(&nats.url(), Duration::from_secs(60)).await;
    let start_call = |delay_ms: u64| {
        let client = gw.client.clone();
        tokio::spawn(async move {
            client
                .call_tool("pool__slow", json!({"steps": 1, "delay_ms": delay_ms}))
                .await
        })
    };
    let running = start_call(30_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = start_call(50);
    // Both have had a frame by now: the running call's first keepalive, the waiting one's.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The survivor joins the queue group after both calls reached the first worker.
    let url = nats.url();
    let _survivor = tokio::task::spawn_blocking(move || ready_worker(&url, "pool"))
        .await
        .unwrap();
    drop(worker); // SIGKILL
    let killed = Instant::now();
    let ended = |call: tokio::task::JoinHandle<Outcome>, which: &'static str| async move {
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .unwrap_or_else(|_| panic!("the {which} call is still waiting 20 s after the kill"))
            .unwrap()
    };
    match ended(running, "running").await {
        Err(e) => assert_eq!(e.rpc().map(|o| o.code), Some(-32010), "{e}"),
        Ok(r) => panic!("the running call was answered: {r:?}"),
    }
    let answered = ended(waiting, "waiting")
        .await
        .expect("the waiting call is answered by the survivor");
    assert!(
        format!("{answered:?}").contains("done after 1 steps"),
        "{answered:?}"
    );
    let waited = killed.elapsed();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

/// N2: the worker serving a call is stopped (SIGSTOP): the caller gets -32010 within the
/// inactivity window; after SIGCONT the worker's late frames land on an inbox nobody reads,
/// and it serves the next calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_is_32010_within_the_inactivity_window_and_sigcont_breaks_nothing() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let nats = NatsServer::start();
    let url = nats.url();
    let worker = tokio::task::spawn_blocking(move || ready_worker(&url, "pool"))
        .await
        .unwrap();
    let pid = Pid::from_raw(i32::try_from(worker.0.id()).unwrap());
    let gw = gateway(&nats.url()).await;
    let call = slow_call_in_flight(&gw.client).await;
    kill(pid, Signal::SIGSTOP).unwrap();
    let code = error_code(call).await;
    kill(pid, Signal::SIGCONT).unwrap();
    assert_eq!(code, -32010);
    // Resumed, the worker goes on publishing the abandoned call's frames to a dead inbox;
    // new calls are answered.
    assert_eq!(echo(&gw.client, "resumed").await, "resumed");
    let done = gw
        .client
        .call_tool("pool__slow", json!({"steps": 2, "delay_ms": 50}))
        .await
        .unwrap();
    assert!(
        format!("{done:?}").contains("done after 2 steps"),
        "{done:?}"
    );
}

/// `[nats]` in the config file does what `--nats` does, and its `separator = ""` exposes the
/// workers' tools under their own names; a worker with no `--nats` serves on the section's URL.
#[test]
fn a_nats_config_section_exposes_the_workers_tools_with_its_naming() {
    let nats = NatsServer::start();
    let dir = std::env::temp_dir().join(format!("toolyard-nats-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!("[nats]\nurl = \"{}\"\nseparator = \"\"\n", nats.url()),
    )
    .unwrap();
    // The worker, given no --nats, takes the section's URL too.
    let config_path = config.to_str().expect("a UTF-8 temp path");
    let _worker = WorkerProcess(spawn_worker(
        &["--name", "plain", "--config", config_path],
        Stdio::inherit(),
    ));
    // --no-demo: the only echo is the worker's, and only if [nats] was read.
    let serve = format!(
        "'{BIN}' serve --stdio --no-demo --config '{}'",
        config.display()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let called = loop {
        let out = Command::new(BIN)
            .args(["client", "--stdio", &serve, "call", "echo"])
            .args(["--args", r#"{"message":"bare"}"#])
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run toolyard client");
        let value: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if value["content"][0]["text"] == "bare" {
            break value;
        }
        assert!(
            Instant::now() < deadline,
            "the worker's echo never answered under its own name: {value}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(called["isError"], Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `toolyard worker ARGS...`, which is expected to exit within 20 s: its status and stderr.
fn worker_exit(args: &[&str]) -> (std::process::ExitStatus, String) {
    crate::exit_within(
        spawn_worker(args, Stdio::piped()),
        Duration::from_secs(20),
        &format!("toolyard worker {args:?}"),
    )
}

/// `--nats-tenant` / `--nats-user` scope a worker's pool and a gateway's calls: a tenant's
/// gateway lists and calls its tenant's pool, an unattributed one does not see it, a pool
/// overlapping it exits saying why, and a user without a tenant is refused before the bus
/// is even reached.
#[test]
fn a_tenants_worker_serves_its_tenants_gateway_and_an_overlapping_worker_exits_saying_why() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _acme = ready_worker_with(&url, "calc", &["--nats-tenant", "acme"]);
    let echoed = through_gateway_with(
        &url,
        "--nats-tenant acme --nats-user bob",
        &["call", "calc__echo", "--args", r#"{"message":"acme's"}"#],
        |v| v["content"][0]["text"] == "acme's",
    );
    assert_eq!(echoed["isError"], Value::Null);
    let unattributed = through_gateway_with(&url, "", &["tools"], |v| v["tools"].is_array());
    assert_eq!(
        unattributed["tools"],
        json!([]),
        "an unattributed gateway sees no tenant's pool"
    );
    // The pool of every caller would take acme's calls too: it refuses to start.
    let (status, stderr) = worker_exit(&["--nats", &url, "--name", "calc"]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("overlaps") && stderr.contains("tenant acme"),
        "{stderr}"
    );
    // Checked before the bus: nothing listens on port 1.
    let (status, stderr) = worker_exit(&[
        "--nats",
        "nats://127.0.0.1:1",
        "--name",
        "calc",
        "--nats-user",
        "bob",
    ]);
    assert!(
        !status.success() && stderr.contains("needs a tenant"),
        "{stderr}"
    );
}

/// A pool started while an overlapping pool's only worker was cut off (stopped, its catalog
/// entry gone as 30 s of silence would take it) served beside that worker once it was back,
/// and each call both took ran twice. Now the later `toolyard worker` gives way at its next
/// heartbeat: it stops taking requests and exits non-zero saying which pool it overlaps.
#[test]
fn a_worker_whose_pool_finds_an_earlier_overlapping_pool_back_exits_saying_why() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::io::BufRead;
    let nats = NatsServer::start();
    let url = nats.url();
    let every = ready_worker(&url, "calc");
    let pid = Pid::from_raw(i32::try_from(every.0.id()).unwrap());
    kill(pid, Signal::SIGSTOP).unwrap();
    let forget = r#"
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    kv = await nc.jetstream().key_value("TY_CATALOG")
    for key in await kv.keys():
        if key.startswith("srv.calc."):
            await kv.delete(key)
    await nc.close()
asyncio.run(main())
"#;
    run_python(forget, &[&url]);
    let mut acme = spawn_worker(
        &["--nats", &url, "--name", "calc", "--nats-tenant", "acme"],
        Stdio::piped(),
    );
    let mut lines = std::io::BufReader::new(acme.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("serving on") => break,
            Some(Ok(line)) => said.push(line),
            _ => {
                let _ = kill(pid, Signal::SIGCONT);
                panic!("acme's pool did not start beside the missing entry: {said:?}");
            }
        }
    }
    kill(pid, Signal::SIGCONT).unwrap();
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    // Two heartbeats (10 s each) at most: the resumed worker's put, then acme's check.
    let (status, _) = crate::exit_within(acme, Duration::from_secs(45), "acme's worker");
    let stderr = rest.join().unwrap().join("\n");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("overlaps")
            && stderr.contains("tenant acme")
            && stderr.contains("every caller"),
        "{stderr}"
    );
    // The pool that joined first serves acme's calls.
    let echoed = through_gateway_with(
        &url,
        "--nats-tenant acme",
        &["call", "calc__echo", "--args", r#"{"message":"once"}"#],
        |v| v["content"][0]["text"] == "once",
    );
    assert_eq!(echoed["isError"], Value::Null);
}

/// Regression: a worker told to stop (SIGTERM) while its NATS server is gone waited forever
/// for a reconnection (deleting its catalog entry, flushing), so only SIGKILL ended it. It
/// now stops after its drain deadline and a short grace for the bus.
/// On one thread (`--workers 1`, a current-thread runtime) as on the default two.
#[test]
fn a_worker_stops_on_sigterm_even_when_its_nats_server_is_gone() {
    for workers in ["1", "2"] {
        a_worker_on_threads_stops_on_sigterm_even_when_its_nats_server_is_gone(workers);
    }
}

fn a_worker_on_threads_stops_on_sigterm_even_when_its_nats_server_is_gone(workers: &str) {
    let nats = NatsServer::start();
    let mut child = Command::new(BIN)
        .args(["worker", "--nats", &nats.url(), "--name", "orphan"])
        .args(["--drain-seconds", "1", "--workers", workers])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolyard worker");
    // Serving (its catalog entry written) before the bus goes.
    std::thread::sleep(Duration::from_secs(2));
    nats.kill();
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // A bound on waiting, not on speed: drain (1 s) + bus grace (2 s) + slack.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker (--workers {workers}) did not stop on SIGTERM with its NATS server gone");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "--workers {workers}: {status:?}");
}

/// A gateway whose NATS server goes away is not ready (`/readyz` 503, the bus listed as a
/// required component down) until it reconnects, and ready again after.
#[test]
fn readyz_follows_the_gateways_nats_connection() {
    let nats = NatsServer::start();
    let gateway = toolyard_testkit::ServerProcess::start(BIN, &["serve", "--nats", &nats.url()]);
    let readyz = || -> (u16, Value) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let r = reqwest::get(format!("{}/readyz", gateway.base_url()))
                .await
                .unwrap();
            let status = r.status().as_u16();
            (
                status,
                serde_json::from_slice(&r.bytes().await.unwrap()).unwrap(),
            )
        })
    };
    let wait_for = |want: u16| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = readyz();
            if status == want {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz never answered {want}: {body}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(200);
    nats.kill();
    let body = wait_for(503);
    assert!(
        body["down"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["kind"] == "nats" && d["required"] == true),
        "{body}"
    );
    nats.restart();
    wait_for(200);
}

#[test]
fn a_worker_serves_the_built_in_connectors_of_its_config() {
    let nats = NatsServer::start();
    let dir = std::env::temp_dir().join(format!("toolyard-it-worker-conn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("worker.toml");
    std::fs::write(&config, "[connectors.sql]\nurl = \"sqlite::memory:\"\n").unwrap();
    let _w = WorkerProcess(
        Command::new(BIN)
            .args([
                "worker",
                "--nats",
                &nats.url(),
                "--name",
                "db",
                "--no-demo",
                "--config",
            ])
            .arg(&config)
            .env_remove("TOOLYARD_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start toolyard worker"),
    );
    let answer = through_gateway(
        &nats.url(),
        &[
            "call",
            "db__query",
            "--args",
            r#"{"sql":"select 6 * 7 as answer"}"#,
        ],
        |v| v.to_string().contains("42"),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_ne!(answer["isError"], true, "{answer}");
}

/// A `toolyard worker --config FILE` process whose file is `config`, killed when dropped,
/// once it has subscribed (it said so on stderr).
fn ready_worker_with_config(url: &str, name: &str, config: &std::path::Path) -> WorkerProcess {
    ready_worker_with(url, name, &["--config", &config.to_string_lossy()])
}

/// A `[[sources]]` entry running our own binary as a stdio MCP server.
fn stdio_source(name: &str) -> String {
    format!(
        "[[sources]]\nname = \"{name}\"\ncommand = \"{BIN}\"\nargs = [\"serve\", \"--stdio\"]\n"
    )
}

/// The tool names `serve --nats` lists, once `done` holds for them.
fn gateway_tools(url: &str, done: impl Fn(&[&str]) -> bool) -> Vec<String> {
    let listed = through_gateway(url, &["tools"], |v| {
        v["tools"].as_array().is_some_and(|t| {
            let names: Vec<&str> = t.iter().filter_map(|t| t["name"].as_str()).collect();
            done(&names)
        })
    });
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_worker_serves_the_gateway_sources_of_its_config_and_follows_a_reload() {
    let nats = NatsServer::start();
    let dir =
        std::env::temp_dir().join(format!("toolyard-it-worker-sources-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("worker.toml");
    std::fs::write(&config, stdio_source("up")).unwrap();
    let w = ready_worker_with_config(&nats.url(), "ops", &config);
    // The source's tools, under the worker's name; a worker with sources leaves the demo
    // set out, as `serve` does.
    let names = gateway_tools(&nats.url(), |n| n.contains(&"ops__up__echo"));
    assert!(
        names.iter().all(|n| n.starts_with("ops__up__")),
        "only the source's tools: {names:?}"
    );
    let echoed = through_gateway(
        &nats.url(),
        &[
            "call",
            "ops__up__echo",
            "--args",
            r#"{"message":"through a worker's source"}"#,
        ],
        |v| !v.is_null(),
    );
    assert_eq!(
        echoed["content"][0]["text"], "through a worker's source",
        "{echoed}"
    );
    // SIGHUP re-reads the sources; the catalog follows the new tools.
    std::fs::write(
        &config,
        format!("{}\n{}", stdio_source("up"), stdio_source("more")),
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(w.0.id()).unwrap()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let names = gateway_tools(&nats.url(), |n| n.contains(&"ops__more__add"));
    assert!(names.contains(&"ops__up__echo".to_owned()), "{names:?}");
    let added = through_gateway(
        &nats.url(),
        &["call", "ops__more__add", "--args", r#"{"a":2,"b":3}"#],
        |v| !v.is_null(),
    );
    assert_ne!(added["isError"], true, "{added}");
    assert!(added.to_string().contains('5'), "{added}");
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_worker_process_serves_its_resources_and_prompts_through_serve_nats() {
    let nats = NatsServer::start();
    // The demo set: a static resource, a template and prompts.
    let _w = worker(&nats.url(), "demo");
    let resources = through_gateway(&nats.url(), &["resources"], |v| {
        v["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["uri"] == "demo://readme"))
    });
    assert!(!resources["resources"].as_array().unwrap().is_empty());
    let read = through_gateway(&nats.url(), &["read", "demo://users/7"], |v| {
        v["contents"][0]["text"].is_string()
    });
    assert!(
        read["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("user 7"),
        "{read}"
    );
    let prompt = through_gateway(
        &nats.url(),
        &["get-prompt", "demo__greet", "--args", r#"{"name":"Ada"}"#],
        |v| v["messages"][0]["content"]["text"].is_string(),
    );
    assert_eq!(
        prompt["messages"][0]["content"]["text"],
        "Please greet Ada warmly."
    );
}

/// One 2026-07-28 request over HTTP to `url`, declaring the tasks extension; the JSON-RPC
/// response (the last message of an event stream, or the JSON body).
async fn modern_rpc(url: &str, method: &str, name: &str, params: Value) -> Value {
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    modern_rpc_as(url, method, name, params, caps).await
}

/// Calls `tool` with `arguments` as a task (a caller with `caps`) through the gateway at
/// `mcp` until the gateway lists it and answers with a task (30 s at most); the task's id.
async fn started_task(mcp: &str, tool: &str, arguments: Value, caps: &Value) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let params = json!({"name": tool, "arguments": arguments});
        let r = modern_rpc_as(mcp, "tools/call", tool, params, caps.clone()).await;
        if r["result"]["resultType"] == "task" {
            return r["result"]["taskId"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "never a task: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`modern_rpc`] for a caller with these client capabilities.
async fn modern_rpc_as(url: &str, method: &str, name: &str, params: Value, caps: Value) -> Value {
    modern_request(url, method, Some(name), params, caps).await
}

/// One 2026-07-28 request over HTTP to `url` from a caller with `caps`, its `Mcp-Name`
/// header `name` when the method names something; the JSON-RPC response (the last message of
/// an event stream, or the JSON body).
pub(crate) async fn modern_request(
    url: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    caps: Value,
) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = name {
        request = request.header("Mcp-Name", name);
    }
    let text = request
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .next_back()
        .map_or(text.as_str(), str::trim);
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Durable tasks through the binaries: a task started through `serve --nats` runs on a
/// worker process; that worker is SIGKILLed mid-task; the job comes back after the ack wait
/// (`[nats] task_ack_wait_ms`) to the other worker, which finds the dead owner silent,
/// takes the task over and finishes it. The caller polls one task id throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_its_worker_killed_mid_run_and_finishes_on_another() {
    let nats = NatsServer::start();
    let dir = std::env::temp_dir().join(format!("ty-durable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("worker.toml");
    std::fs::write(&config, "[nats]\ntask_ack_wait_ms = 1000\n").unwrap();
    let (url, cfg) = (nats.url(), config.clone());
    let first = tokio::task::spawn_blocking(move || ready_worker_with_config(&url, "pool", &cfg))
        .await
        .unwrap();
    let gateway = gateway_process(&nats.url()).await;
    let mcp = gateway.url();
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let id = started_task(
        &mcp,
        "pool__slow_task",
        json!({"steps": 30, "delay_ms": 100}),
        &caps,
    )
    .await;
    let get = || {
        let (mcp, id) = (mcp.clone(), id.clone());
        async move { modern_rpc(&mcp, "tasks/get", &id, json!({"taskId": id})).await["result"].clone() }
    };
    // Running on the first worker (its instance id starts with its pid).
    let on_first = format!("running on worker {}-", first.0.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = get().await;
        if t["statusMessage"]
            .as_str()
            .unwrap_or("")
            .starts_with(&on_first)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never ran on the first worker: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = nats.url();
    let second =
        tokio::task::spawn_blocking(move || ready_worker_with_config(&url, "pool", &config))
            .await
            .unwrap();
    drop(first); // SIGKILL, mid-task
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let t = get().await;
        if t["status"] != "working" {
            break t;
        }
        assert!(Instant::now() < deadline, "never finished: {t}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "done after 30 steps");
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A durable task asking its caller, through the binaries: `pool__ask_name_task` started
/// through `serve --nats` puts its question in the task (`tasks/get`: `input_required`);
/// the worker that asked is SIGKILLed while the task waits (it holds nothing of it); the
/// answer, given with `tasks/update`, resumes the task on another worker process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_its_callers_answer_outlives_its_worker_and_goes_on_on_another() {
    let nats = NatsServer::start();
    let url = nats.url();
    let first = tokio::task::spawn_blocking(move || worker(&url, "pool"))
        .await
        .unwrap();
    let gateway = gateway_process(&nats.url()).await;
    let mcp = gateway.url();
    let caps = json!({
        "extensions": {"io.modelcontextprotocol/tasks": {}},
        "elicitation": {"form": {}},
    });
    let rpc = |method: &'static str, name: String, params: Value| {
        let (mcp, caps) = (mcp.clone(), caps.clone());
        async move { modern_rpc_as(&mcp, method, &name, params, caps).await }
    };
    let id = started_task(&mcp, "pool__ask_name_task", json!({}), &caps).await;
    let until = |what: &'static str, done: fn(&Value) -> bool| {
        let (rpc, id) = (&rpc, id.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let t = rpc("tasks/get", id.clone(), json!({"taskId": id})).await["result"].clone();
                if done(&t) {
                    return t;
                }
                assert!(Instant::now() < deadline, "never {what}: {t}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let asked = until("asked", |t| t["status"] == "input_required").await;
    assert_eq!(
        asked["inputRequests"]["name"]["params"]["message"], "What is your name?",
        "{asked}"
    );
    drop(first); // SIGKILL, while the task waits
    let url = nats.url();
    let _second = tokio::task::spawn_blocking(move || worker(&url, "pool"))
        .await
        .unwrap();
    let answered = rpc(
        "tasks/update",
        id.clone(),
        json!({"taskId": id, "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    assert!(answered.get("error").is_none(), "{answered}");
    let done = until("ended", |t| {
        t["status"] != "working" && t["status"] != "input_required"
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Hello, Ada!",
        "{done}"
    );
}

/// `GET url`: its status and its JSON body (null when it is not JSON).
async fn get_json(url: &str) -> (u16, Value) {
    let r = reqwest::get(url).await.unwrap();
    let status = r.status().as_u16();
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

/// Polls `GET url` until it answers `want` (30 s at most); its body then.
pub(crate) async fn wait_for_status(url: &str, want: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get_json(url).await;
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{url} never answered {want}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long a worker without its broker lived before it waited for it.
const GAVE_UP: Duration = Duration::from_secs(8);

/// `toolyard serve --nats URL` as a process (started on a blocking thread: it waits until
/// the gateway serves HTTP, which may be before its broker is up).
async fn gateway_process(url: &str) -> toolyard_testkit::ServerProcess {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        toolyard_testkit::ServerProcess::start(BIN, &["serve", "--nats", &url])
    })
    .await
    .unwrap()
}

/// Junk on the change-event subject is dropped and logged, but not a line per message: a
/// worker sent 1 000 messages that are not events says so ten times (the 1st, 2nd, 4th, ...
/// 512th, each with the count) and then nothing more.
#[test]
fn junk_on_the_event_subject_is_logged_at_each_doubling_not_per_message() {
    let nats = NatsServer::start();
    let url = nats.url();
    let (_worker, stderr) = worker_saying(&["--nats", &url, "--name", "calc", "--workers", "1"]);
    let junk = r#"
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    for _ in range(1000):
        await nc.publish("mcp.v1.events", b"not an event")
    await nc.flush()
    await nc.close()
asyncio.run(main())
"#;
    run_python(junk, &[&url]);
    stderr.wait_for("dropped=512");
    let more = stderr.lines_within(Duration::from_millis(500));
    assert!(
        !more.iter().any(|l| l.contains("dropped a change event")),
        "logged again after the 512th: {more:?}"
    );
    // The worker serves on.
    let answer = nats_client(&url, "echo", &json!({"message": "still here"}), &[]);
    let last = answer["frames"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["frame"], "end", "{last}");
}

/// Junk in the workers' catalog (anything on the bus may write the bucket) is ignored by
/// `serve --nats` and logged at each doubling of the count, not per entry: 200 unreadable
/// entries under keys of their own make 8 warning lines (the 1st, 2nd, 4th... 128th), not
/// 200, and the gateway serves the worker's tools all the same.
#[test]
fn junk_in_the_catalog_is_logged_at_each_doubling_not_per_entry() {
    let nats = NatsServer::start();
    let url = nats.url();
    let (_worker, _said) = worker_saying(&["--nats", &url, "--name", "calc"]);
    let junk = r#"
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    kv = await nc.jetstream().key_value(sys.argv[2])
    for i in range(200):
        await kv.put(f"srv.junk.i{i}", b"not an entry")
    await nc.close()
asyncio.run(main())
"#;
    run_python(junk, &[&url, toolyard_nats::CATALOG_BUCKET]);
    let (_gateway, said) = gateway_saying(&url);
    said.wait_for("ignored=128");
    let more = said.lines_within(Duration::from_millis(500));
    assert!(
        !more.iter().any(|l| l.contains("catalog entry")),
        "logged again after the 128th: {more:?}"
    );
    let tools = gateway_tools(&url, |names| names.contains(&"calc__echo"));
    assert!(tools.iter().any(|n| n == "calc__echo"), "{tools:?}");
}

/// Two pools of one server whose scopes overlap (here the second written into the catalog by
/// hand, as a pool started while the catalog could not be read would be): every gateway says
/// so, once, naming both, and serves on.
#[test]
fn a_gateway_says_when_two_pools_of_a_server_overlap() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = ready_worker(&url, "calc");
    let (_gateway, said) = gateway_saying(&url);
    let overlapping = r#"
import asyncio, json, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    kv = await nc.jetstream().key_value(sys.argv[2])
    entry = {"server": "calc", "instance": "late1", "sha256": "", "tools": [],
             "scope": {"tenant": "acme"}, "joined": 1}
    await kv.put("srv.calc.late1", json.dumps(entry).encode())
    await nc.close()
asyncio.run(main())
"#;
    run_python(overlapping, &[&url, toolyard_nats::CATALOG_BUCKET]);
    let line = said.wait_for("overlap");
    assert!(
        line.contains("every caller") && line.contains("tenant acme"),
        "{line}"
    );
    let more = said.lines_within(Duration::from_millis(500));
    assert!(
        !more.iter().any(|l| l.contains("overlap")),
        "said twice: {more:?}"
    );
    let tools = gateway_tools(&url, |names| names.contains(&"calc__echo"));
    assert!(tools.iter().any(|n| n == "calc__echo"), "{tools:?}");
}

/// `toolyard serve --stdio --nats URL` (its log at the default level), and what it says on
/// stderr.
fn gateway_saying(url: &str) -> (WorkerProcess, StderrLines) {
    let mut gateway = Command::new(BIN)
        .args(["serve", "--stdio", "--nats", url])
        .env_remove("TOOLYARD_NATS")
        .env_remove("TOOLYARD_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolyard serve");
    let said = StderrLines::of(&mut gateway);
    (WorkerProcess(gateway), said)
}

/// `toolyard worker ARGS...` serving, and what it says on stderr.
fn worker_saying(args: &[&str]) -> (WorkerProcess, StderrLines) {
    let mut child = spawn_worker(args, Stdio::piped());
    let said = StderrLines::of(&mut child);
    let worker = WorkerProcess(child);
    said.wait_for("serving on");
    (worker, said)
}

/// Runs a Python `script` (nats-py at hand) with `args`, which must succeed.
fn run_python(script: &str, args: &[&str]) {
    let ran = Command::new(cache().join("venv/bin/python"))
        .arg("-c")
        .arg(script)
        .args(args)
        .status()
        .expect("run python (scripts/install-test-deps installs nats-py)");
    assert!(ran.success(), "the script failed: {ran}");
}

/// A child's stderr, line by line, read on a thread of its own (each line echoed to the
/// test's stderr), so that waiting for a line has a deadline: a process that says nothing
/// fails the test instead of hanging it.
struct StderrLines(std::sync::mpsc::Receiver<String>);

impl StderrLines {
    fn of(child: &mut Child) -> StderrLines {
        use std::io::BufRead;
        let stderr = child.stderr.take().expect("spawned with a piped stderr");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                eprintln!("{line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        StderrLines(rx)
    }

    /// The lines said until `quiet` passes without one.
    fn lines_within(&self, quiet: Duration) -> Vec<String> {
        let mut lines = Vec::new();
        while let Ok(line) = self.0.recv_timeout(quiet) {
            lines.push(line);
        }
        lines
    }

    /// The next line containing `what`, within 30 s.
    fn wait_for(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(e) => panic!("the process never said {what:?} ({e}): it exited, or hangs"),
            }
        }
    }
}

/// A gateway and a worker started while their broker is down wait for it instead of
/// failing (both used to exit once their first bucket lookup ran out, ~6-10 s in): the
/// gateway serves HTTP at once, `/healthz` 200 and `/readyz` 503 naming the bus and the
/// catalog; the worker says it cannot join yet. Once the broker comes up, the gateway is
/// ready, lists the worker's tools, calls one, and runs a durable task on it (its task
/// bucket opened late). The worker's probes (`--health`): `/healthz` 200 throughout,
/// `/readyz` 503 until it serves on the bus, then 200, 503 again while the broker is
/// killed and 200 once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_and_a_worker_started_before_their_broker_wait_for_it_and_then_serve() {
    let nats = NatsServer::start();
    nats.kill();
    let gateway = gateway_process(&nats.url()).await;
    let gateway_readyz = format!("{}/readyz", gateway.base_url());
    let (status, body) = get_json(&gateway_readyz).await;
    assert_eq!(status, 503, "{body}");
    let down: Vec<&str> = body["down"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "nats" && d["required"] == true)
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert!(down.contains(&"bus") && down.contains(&"catalog"), "{body}");

    let spawned = Instant::now();
    let health = format!("127.0.0.1:{}", toolyard_testkit::free_port());
    let mut child = spawn_worker(
        &["--nats", &nats.url(), "--name", "late", "--health", &health],
        Stdio::piped(),
    );
    let lines = StderrLines::of(&mut child);
    let mut worker = WorkerProcess(child);
    // It says why it cannot connect (what a plain TCP connection to the broker's address
    // says), and is still there past the point where it used to give up (~6 s after its
    // start).
    lines.wait_for(&format!(
        "cannot connect to NATS: 127.0.0.1:{}: Connection refused",
        nats.port()
    ));
    tokio::time::sleep(GAVE_UP.saturating_sub(spawned.elapsed())).await;
    assert!(
        worker.0.try_wait().unwrap().is_none(),
        "the worker exited without its broker"
    );
    assert_eq!(get_json(&gateway_readyz).await.0, 503);
    // The worker's probes: alive, not ready (not serving on the bus yet).
    let (worker_healthz, worker_readyz) = (
        format!("http://{health}/healthz"),
        format!("http://{health}/readyz"),
    );
    assert_eq!(get_json(&worker_healthz).await.0, 200);
    let (status, body) = get_json(&worker_readyz).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["down"][0]["name"], "bus", "{body}");

    let restarted = tokio::task::spawn_blocking(move || {
        nats.restart();
        nats
    })
    .await
    .unwrap();
    lines.wait_for("serving on");
    wait_for_status(&worker_readyz, 200).await;
    wait_for_status(&gateway_readyz, 200).await;
    let mcp = gateway.url();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = modern_rpc(
            &mcp,
            "tools/call",
            "late__echo",
            json!({"name": "late__echo", "arguments": {"message": "after the broker"}}),
        )
        .await;
        if r["result"]["content"][0]["text"] == "after the broker" {
            break;
        }
        assert!(Instant::now() < deadline, "never called: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let created = modern_rpc(
        &mcp,
        "tools/call",
        "late__slow_task",
        json!({"name": "late__slow_task", "arguments": {"steps": 2, "delay_ms": 10}}),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let t = modern_rpc(&mcp, "tasks/get", &id, json!({"taskId": id})).await["result"].clone();
        if t["status"] != "working" {
            break t;
        }
        assert!(Instant::now() < deadline, "never finished: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "done after 2 steps");
    // The worker's readiness follows its connection: the broker killed, 503 naming the bus;
    // back, 200.
    restarted.kill();
    let body = wait_for_status(&worker_readyz, 503).await;
    assert_eq!(body["down"][0]["name"], "bus", "{body}");
    let restarted = tokio::task::spawn_blocking(move || {
        restarted.restart();
        restarted
    })
    .await
    .unwrap();
    wait_for_status(&worker_readyz, 200).await;
    assert_eq!(get_json(&worker_healthz).await.0, 200);
    drop(restarted);
}

/// nats-server 2.10 lacks the KV features the bridge relies on (and async-nats cannot even
/// read 2.9's answers, Debian 12's): a gateway and a worker on it used to retry for ever
/// with "limit markers not supported" (on 2.9: "data did not match any variant of untagged
/// enum Response"). They now say which version the server is and which they need: the
/// worker on stderr, the gateway in its `/readyz` (the catalog down, with that reason).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_and_a_worker_on_a_nats_server_older_than_2_11_say_the_version_they_need() {
    let nats = NatsServer::start_old();
    let mut child = spawn_worker(&["--nats", &nats.url(), "--name", "old"], Stdio::piped());
    let lines = StderrLines::of(&mut child);
    let _worker = WorkerProcess(child);
    let said = lines.wait_for("2.11 or newer");
    assert!(
        said.contains("version 2.10.26") && said.contains("2.11 or newer"),
        "the worker did not say the server's version and the one it needs: {said:?}"
    );

    let gateway = gateway_process(&nats.url()).await;
    let readyz = format!("{}/readyz", gateway.base_url());
    let deadline = Instant::now() + Duration::from_secs(30);
    let reason = loop {
        let (status, body) = get_json(&readyz).await;
        assert_eq!(
            status, 503,
            "a gateway on nats-server 2.10 is ready: {body}"
        );
        let catalog = body["down"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == "catalog")
            .map(|d| d["reason"].as_str().unwrap_or_default().to_owned());
        if let Some(reason) = catalog.filter(|r| r.contains("2.11 or newer")) {
            break reason;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway's /readyz never named the version it needs: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(reason.contains("version 2.10.26"), "{reason}");
}

/// A `calc__slow` call of `steps` steps of 100 ms through the gateway at `mcp`, on its way.
fn slow_call_through(mcp: &str, steps: u32) -> tokio::task::JoinHandle<Value> {
    let mcp = mcp.to_owned();
    tokio::spawn(async move {
        modern_rpc(
            &mcp,
            "tools/call",
            "calc__slow",
            json!({"name": "calc__slow", "arguments": {"steps": steps, "delay_ms": 100}}),
        )
        .await
    })
}

/// The JSON-RPC answer of a call on its way (20 s at most: a hang fails the test).
async fn answer_of(call: tokio::task::JoinHandle<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the call in flight hung")
        .unwrap()
}

/// Change events reach gateways and workers on a connection of their own. Any client may
/// publish on the event subject, and async-nats ends a connection on a message whose header
/// block it cannot parse (a line without a colon): on the connection that carries the calls,
/// one such message ended every call in flight on every gateway of the bus with -32010
/// ("the connection to the NATS server was lost") and dropped every worker off its queue
/// group for a moment. Now the call in flight through `serve --nats` to a worker process
/// finishes with its answer, and the next calls are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_event_whose_headers_do_not_parse_leaves_the_calls_in_flight_be() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = ready_worker(&url, "calc");
    let gateway = gateway_process(&url).await;
    let mcp = gateway.url();
    let deadline = Instant::now() + Duration::from_secs(30);
    while modern_rpc(
        &mcp,
        "tools/call",
        "calc__echo",
        json!({"name": "calc__echo", "arguments": {"message": "up"}}),
    )
    .await["result"]["content"][0]["text"]
        != "up"
    {
        assert!(Instant::now() < deadline, "the gateway never served calc");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let slow = slow_call_through(&mcp, 10);
    tokio::time::sleep(Duration::from_millis(400)).await;
    for bad in ["NoColon\r\n", "Bad Name: x\r\n"] {
        tokio::task::block_in_place(|| {
            nats.publish_unchecked(
                "mcp.v1.events",
                None,
                bad,
                r#"{"event":"tools/list_changed"}"#,
            )
        });
    }
    let answer = answer_of(slow).await;
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(answer["result"]["isError"], json!(null), "{answer}");
    let echoed = modern_rpc(
        &mcp,
        "tools/call",
        "calc__echo",
        json!({"name": "calc__echo", "arguments": {"message": "after"}}),
    )
    .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "after", "{echoed}");
}

/// A message whose header block async-nats cannot parse, put into the durable tasks' bucket
/// (a plain publish on `$KV.TY_TASKS.<key>`): async-nats ends the connection that reads it,
/// so with the gateway following the bucket on its calls' connection the task changes after
/// it dropped that connection, ending the calls in flight with -32010. `serve --nats` keeps
/// its task store on the connection it watches the catalog and change events on: the call
/// in flight at each of four task starts finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_record_whose_headers_do_not_parse_leaves_the_calls_in_flight_be() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = ready_worker(&url, "calc");
    let gateway = gateway_process(&url).await;
    let mcp = gateway.url();
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    started_task(
        &mcp,
        "calc__slow_task",
        json!({"steps": 1, "delay_ms": 10}),
        &caps,
    )
    .await;
    let poison = format!("$KV.{}.poison", toolyard_nats::TASKS_BUCKET);
    tokio::task::block_in_place(|| nats.publish_unchecked(&poison, None, "NoColon\r\n", "{}"));
    for i in 0..4 {
        let slow = slow_call_through(&mcp, 5);
        tokio::time::sleep(Duration::from_millis(150)).await;
        started_task(
            &mcp,
            "calc__slow_task",
            json!({"steps": 1, "delay_ms": 10}),
            &caps,
        )
        .await;
        let answer = answer_of(slow).await;
        assert!(answer.get("error").is_none(), "task start {i}: {answer}");
    }
}

/// A worker whose connection drops and comes back between two looks says so in its log,
/// at most once a second and with the number of drops. async-nats reconnects at once when it
/// reads a message it cannot parse, here a request whose subject is not UTF-8 (anyone who
/// may call a tool may publish one): a worker could flap many times a second under a stream
/// of them, losing the requests in transit each time, and say nothing at the default level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_connection_flaps_says_so_at_most_once_a_second_with_the_count() {
    let nats = NatsServer::start();
    let (_worker, said) = worker_saying(&["--nats", &nats.url(), "--name", "calc"]);
    let poison = b"mcp.v1.req._._.calc.tools.call.\xff";
    for _ in 0..20 {
        tokio::task::block_in_place(|| nats.publish_bytes_unchecked(poison, None, b"", b"{}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Drops within a second of a line are said at the next look: at most 5 s on.
    let lines = said.lines_within(Duration::from_secs(6));
    let flaps: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("the NATS connection was lost and is back"))
        .collect();
    let times: u64 = flaps
        .iter()
        .map(|l| {
            let n = l
                .split("times=")
                .nth(1)
                .expect("the line says how many times");
            n.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("a count")
        })
        .sum();
    assert!(
        (1..=3).contains(&flaps.len()),
        "20 drops in a second were said in {} lines: {lines:?}",
        flaps.len()
    );
    assert!(
        (10..=20).contains(&times),
        "the lines count {times} drops of 20: {flaps:?}"
    );
}

/// The `cid` of each connection named `name` that nats-server has now (`/connz`).
async fn connection_ids(nats: &NatsServer, name: &str) -> Vec<u64> {
    let (status, connz) = get_json(&format!("{}/connz?limit=1024", nats.monitoring_url())).await;
    assert_eq!(status, 200, "{connz}");
    connz["connections"]
        .as_array()
        .expect("connz lists connections")
        .iter()
        .filter(|c| c["name"] == name)
        .filter_map(|c| c["cid"].as_u64())
        .collect()
}

/// A durable task job async-nats cannot read (a header line without a colon, a subject that
/// is not UTF-8; anything on the bus may publish to the work queue) is never acked: it came
/// back every `ack_wait` for good, and each delivery ended the connection that read it. With
/// the jobs on the requests' connection, that one dropped every `ack_wait`, losing the
/// requests in transit each time. A worker now pulls its jobs on a connection of its own
/// (`ty-worker-NAME-jobs`), and once that connection dropped it reads the jobs handed out and
/// not acked through the stream's JSON get API and removes those it cannot read, saying so:
/// the jobs' connection drops once per such job, and the requests' one stays up, serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_workers_client_cannot_read_is_removed_and_the_requests_connection_stays_up() {
    let nats = NatsServer::start();
    let dir = std::env::temp_dir().join(format!("ty-unreadable-job-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("worker.toml");
    std::fs::write(&config, "[nats]\ntask_ack_wait_ms = 500\n").unwrap();
    let (_worker, said) = worker_saying(&[
        "--nats",
        &nats.url(),
        "--name",
        "calc",
        "--config",
        &config.to_string_lossy(),
    ]);
    let requests = connection_ids(&nats, "ty-worker-calc").await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let jobs_connection = || async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ids = connection_ids(&nats, "ty-worker-calc-jobs").await;
            if ids.len() == 1 {
                return ids[0];
            }
            assert!(Instant::now() < deadline, "no jobs connection: {ids:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // The work queue and the worker's consumer are set up beside serving: a job published
    // before the stream exists is stored nowhere.
    let jsz = format!("{}/jsz?consumers=true", nats.monitoring_url());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reqwest::get(&jsz)
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .contains("\"tyw-calc\"")
    {
        assert!(Instant::now() < deadline, "no job consumer tyw-calc");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let poisons: [(&str, &[u8], &[u8]); 2] = [
        (
            "a header line without a colon",
            b"mcp.v1.task.calc.echo",
            b"NATS/1.0\r\nNoColon\r\n\r\n",
        ),
        ("a subject that is not UTF-8", b"mcp.v1.task.calc.\xff", b""),
    ];
    for (what, subject, head) in poisons {
        let before = jobs_connection().await;
        tokio::task::block_in_place(|| nats.publish_bytes_unchecked(subject, None, head, b"{}"));
        let line = tokio::task::block_in_place(|| {
            said.wait_for("removed a message the NATS client cannot read")
        });
        assert!(line.contains("TY_TASK_JOBS"), "{what}: {line}");
        // The premise: it did drop the jobs' connection (once).
        let after = jobs_connection().await;
        assert_ne!(after, before, "{what} did not drop the jobs' connection");
        // Removed: it does not come back, whatever `ack_wait` (500 ms) passes.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(
            jobs_connection().await,
            after,
            "{what} came back and dropped the jobs' connection again"
        );
        assert_eq!(
            connection_ids(&nats, "ty-worker-calc").await,
            requests,
            "{what}: the requests' connection was replaced"
        );
    }
    let answered = tokio::task::block_in_place(|| {
        through_gateway(
            &nats.url(),
            &["call", "calc__echo", "--args", r#"{"message":"up"}"#],
            |v| v["content"][0]["text"] == "up",
        )
    });
    assert_eq!(answered["content"][0]["text"], "up", "{answered}");
}

/// The tool names a gateway's Streamable HTTP endpoint `mcp` lists now (2026-07-28).
async fn listed_through(mcp: &str) -> Vec<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let answer: Value = reqwest::Client::new()
        .post(mcp)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .map(|b| serde_json::from_slice(&b).unwrap_or(Value::Null))
        .unwrap();
    answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A catalog entry async-nats cannot read (a header line without a colon, put with a plain
/// publish; anything on the bus may write the bucket) drops the connection that reads it, and
/// the gateway's catalog watch, set up again from the last revision it saw, was handed it
/// again, and again: `serve --nats` stopped following the catalog, and a worker started after
/// it was not listed until the entry expired (three heartbeats, 30 s), as long as someone put
/// another. Once the watch's connection changed, the entry is now found through the stream's
/// JSON get API and its key purged, with a warning: the next worker is listed within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_entry_the_client_cannot_read_is_removed_and_the_workers_after_it_are_listed() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _calc = ready_worker(&url, "calc");
    let gateway = gateway_process(&url).await;
    let mcp = gateway.url();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listed_through(&mcp).await.iter().any(|t| t == "calc__echo") {
        assert!(Instant::now() < deadline, "the gateway never listed calc");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let poison = "$KV.TY_CATALOG.srv.junk.poison";
    tokio::task::block_in_place(|| nats.publish_unchecked(poison, None, "NoColon\r\n", "{}"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The entry is purged: what its key holds last is a purge marker.
    let purged = r#"
import asyncio, base64, json, sys, time, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    deadline = time.time() + 10
    while True:
        got = await nc.request("$JS.API.STREAM.MSG.GET.KV_TY_CATALOG",
            json.dumps({"last_by_subj": "$KV.TY_CATALOG.srv.junk.poison"}).encode(), timeout=2)
        message = json.loads(got.data).get("message", {})
        headers = base64.b64decode(message.get("hdrs", "")).decode("utf-8", "replace")
        if "KV-Operation: PURGE" in headers:
            break
        if time.time() > deadline:
            sys.exit("the unreadable entry is still the key's last message: " + repr(headers))
        await asyncio.sleep(0.1)
    await nc.close()
asyncio.run(main())
"#;
    tokio::task::block_in_place(|| run_python(purged, &[&url]));
    let _later = ready_worker(&url, "later");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let names = listed_through(&mcp).await;
        if names.iter().any(|t| t == "later__echo") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a worker started after the unreadable entry is not listed in 10 s: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
