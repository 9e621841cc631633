//! The gateway (`toolyard serve --config gateway.toml`) in front of real third-party MCP
//! servers, with the official Python SDK (`mcp`, tests/interop/gateway_client.py) as the
//! downstream client, over Streamable HTTP and stdio, in both protocol generations.
//!
//! The sources of the gateway (config written at test time into a temp dir):
//!
//! - `everything`: `@modelcontextprotocol/server-everything` as a **plugin**
//!   (tests/fixtures/gateway/everything-plugin/plugin.json, the snake_case shape),
//!   lifecycle `singleton`;
//! - `everything_t`: the same server as a plugin in the MCP registry's `server.json` shape
//!   (fixtures/gateway/everything-registry), lifecycle `transient`;
//! - `everything_http`: server-everything started by the test in Streamable HTTP mode on a
//!   free port, as a **remote** (`url = ...`);
//! - `fs`: `@modelcontextprotocol/server-filesystem` (`command = "node"`, a temp dir as its
//!   one allowed directory);
//! - `time`, `git`: mcp-server-time and mcp-server-git run by the venv's python
//!   (`python -m mcp_server_time`, `python -m mcp_server_git --repository <temp repo>`).
//!
//! **Why npx works offline.** Both plugin manifests use the `npx` runtime hint, so the
//! gateway runs `npx -y @modelcontextprotocol/server-everything@2026.8.31 stdio`. The
//! source's `cwd` is `$TOOLYARD_CACHE/npm`, the npm project `scripts/install-test-deps`
//! installed the pinned package into: `npm exec` finds a matching version in the local
//! project's `node_modules` and runs its bin without fetching anything. The source's `env`
//! sets `npm_config_offline=true` (and no update notifier), so should npx ever want the
//! registry, it fails instead of downloading: the test proves the manifest path works
//! without network rather than silently depending on it. (`command = "node"` with the dist
//! entry would also work but would bypass the manifest's runtime hint, which is what these
//! sources are here to exercise.)
//!
//! Each run of the client lists the tools (every prefix present, nothing else), calls one
//! tool of each source (`*__echo`, `fs__list_allowed_directories`, `fs__list_directory`,
//! `time__get_current_time`, `git__git_status`) and calls
//! `everything__trigger-sampling-request`: server-everything asks the gateway for sampling,
//! the gateway relays the question to the Python client (a server-to-client request for a
//! legacy caller, an `input_required` round for a 2026-07-28 caller), whose callback
//! answers a fixed text that must come back in the tool's result.
//!
//! `[gateway] failure_mode = "fail"`: a source that cannot start makes `toolyard serve` exit
//! with that source's error instead of being skipped, so a broken source fails the test
//! loudly. Every process source gets `TOOLYARD_GWI_FIXTURE=<unique>` in its `env`: the test
//! finds its own upstream processes by it (the npx one must be an `npm exec` process), checks
//! none outlives the gateway (SIGTERM for the HTTP gateway, stdin closed by the SDK for the
//! stdio one) and kills leftovers of a failed run (only those, by pid).
//!
//! Without `scripts/install-test-deps`' cache these tests fail and say so.

use crate::client_interop::{git, installed, HttpServer, TempDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use toolyard_testkit::{cache, repo, ServerProcess as Server};

/// The pinned server-everything (tests/interop/package.json); the manifests name it.
const EVERYTHING_VERSION: &str = "2026.8.31";
/// What the Python client's sampling callback answers.
const SAMPLED: &str = "sampled through the toolyard gateway";
/// The model it names.
const MODEL: &str = "toolyard-gateway-test-model";
/// How long a server may take to listen.
const WAIT: Duration = Duration::from_secs(60);
/// An environment variable every process source of a fixture gets (through its `env`), so
/// the test can find the upstream processes of its own gateways (and only those).
const TAG_VAR: &str = "TOOLYARD_GWI_FIXTURE";

fn venv_python(modules: &[&str]) -> PathBuf {
    let python = installed("venv/bin/python");
    let lib = installed("venv/lib");
    for module in modules {
        let found = std::fs::read_dir(&lib)
            .expect("read the venv's lib folder")
            .filter_map(Result::ok)
            .any(|e| e.path().join("site-packages").join(module).exists());
        assert!(
            found,
            "the Python package {module} is not in {}: run scripts/install-test-deps",
            lib.display()
        );
    }
    python
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a JSON string is a TOML basic string")
}

/// Everything one gateway configuration needs, removed / stopped when dropped.
struct Fixture {
    /// The value of [`TAG_VAR`] in the environment of every process source of this fixture.
    tag: String,
    config: PathBuf,
    fs_dir: PathBuf,
    repo_dir: PathBuf,
    _everything_http: HttpServer,
    _dirs: Vec<TempDir>,
}

/// The sources' names (= prefixes), in the config's order.
const SOURCES: [&str; 6] = [
    "everything",
    "everything_t",
    "everything_http",
    "fs",
    "time",
    "git",
];

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let python = venv_python(&["mcp", "mcp_server_time", "mcp_server_git"]);
        let npm = installed("npm/node_modules/@modelcontextprotocol/server-everything")
            .ancestors()
            .nth(3)
            .expect("the cache's npm project")
            .to_path_buf();
        let filesystem =
            installed("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gateway");

        let config_dir = TempDir::new(&format!("{tag}-config"));
        let fs = TempDir::new(&format!("{tag}-fs"));
        std::fs::write(fs.path().join("hello.txt"), "hello from the gateway test\n").unwrap();
        let git_repo = TempDir::new(&format!("{tag}-git"));
        git(git_repo.path(), &["init", "-q"]);
        std::fs::write(git_repo.path().join("README.md"), "# gateway\n").unwrap();
        git(git_repo.path(), &["add", "README.md"]);
        git(git_repo.path(), &["commit", "-q", "-m", "first commit"]);
        std::fs::write(git_repo.path().join("untracked.txt"), "new\n").unwrap();
        let everything_http = HttpServer::everything("streamableHttp");

        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let tag_value = format!(
            "{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mark = format!("{TAG_VAR} = {}", toml_str(&tag_value));
        let npx_env = format!(
            r#"{{ npm_config_offline = "true", npm_config_update_notifier = "false", {mark} }}"#
        );
        let config = format!(
            r#"# Written by tests/it/gateway_interop.rs
[server]
name = "gateway-interop"

[gateway]
failure_mode = "fail"

[[sources]]
name = "everything"
plugin = {plugin}
cwd = {npm}
env = {npx_env}
lifecycle = "singleton"
startup_timeout_ms = 60000

[[sources]]
name = "everything_t"
plugin = {registry}
cwd = {npm}
env = {npx_env}
lifecycle = "transient"
startup_timeout_ms = 60000

[[sources]]
name = "everything_http"
url = {url}

[[sources]]
name = "fs"
command = "node"
args = [{filesystem}, {fs_dir}]
env = {{ {mark} }}

[[sources]]
name = "time"
command = {python}
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
env = {{ {mark} }}

[[sources]]
name = "git"
command = {python}
args = ["-m", "mcp_server_git", "--repository", {repo_dir}]
env = {{ {mark} }}
"#,
            plugin = toml_str(&fixtures.join("everything-plugin").to_string_lossy()),
            registry = toml_str(&fixtures.join("everything-registry").to_string_lossy()),
            npm = toml_str(&npm.to_string_lossy()),
            url = toml_str(&everything_http.url("/mcp")),
            filesystem = toml_str(&filesystem.to_string_lossy()),
            fs_dir = toml_str(&fs.path().to_string_lossy()),
            python = toml_str(&python.to_string_lossy()),
            repo_dir = toml_str(&git_repo.path().to_string_lossy()),
        );
        let path = config_dir.path().join("gateway.toml");
        std::fs::write(&path, config).unwrap();
        Fixture {
            tag: tag_value,
            config: path,
            fs_dir: fs.path().to_owned(),
            repo_dir: git_repo.path().to_owned(),
            _everything_http: everything_http,
            _dirs: vec![config_dir, fs, git_repo],
        }
    }

    fn config(&self) -> &str {
        self.config.to_str().expect("a UTF-8 path")
    }

    /// One call per source (name, arguments, text the result must contain).
    fn calls(&self) -> Vec<(String, Value, String)> {
        let fs_dir = self.fs_dir.to_string_lossy().into_owned();
        let repo_dir = self.repo_dir.to_string_lossy().into_owned();
        vec![
            (
                "everything__echo".into(),
                json!({"message": "via singleton"}),
                "Echo: via singleton".into(),
            ),
            (
                "everything_t__echo".into(),
                json!({"message": "via transient"}),
                "Echo: via transient".into(),
            ),
            (
                "everything_http__echo".into(),
                json!({"message": "via remote"}),
                "Echo: via remote".into(),
            ),
            (
                "fs__list_allowed_directories".into(),
                json!({}),
                fs_dir.clone(),
            ),
            (
                "fs__list_directory".into(),
                json!({"path": fs_dir}),
                "hello.txt".into(),
            ),
            (
                "time__get_current_time".into(),
                json!({"timezone": "UTC"}),
                "\"timezone\": \"UTC\"".into(),
            ),
            (
                "git__git_status".into(),
                json!({"repo_path": repo_dir}),
                "untracked.txt".into(),
            ),
        ]
    }
}

/// The live processes whose environment holds `TAG_VAR=tag`, with their command lines.
fn tagged(tag: &str) -> Vec<(i32, String)> {
    let needle = format!("{TAG_VAR}={tag}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
        })
        .filter(|pid| !is_zombie(*pid))
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect()
}

/// Whether the process is gone or a zombie (exited, not yet reaped).
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Waits (up to `within`) until no process of the fixture is left; returns what is left.
fn leftovers(tag: &str, within: Duration) -> Vec<(i32, String)> {
    let deadline = Instant::now() + within;
    loop {
        let left = tagged(tag);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Fixture {
    /// Kills whatever upstream process of this fixture a failed test left behind (found by
    /// its tag, so never anybody else's).
    fn drop(&mut self) {
        for (pid, _) in tagged(&self.tag) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// How the Python client reaches the gateway.
enum Via<'a> {
    /// Streamable HTTP at this URL.
    Http(&'a str),
    /// It spawns `toolyard serve --config <config> --stdio` itself.
    Stdio,
}

/// Runs gateway_client.py once and returns its report, after asserting every check passed.
fn run_client(fixture: &Fixture, protocol: &str, via: Via<'_>) -> Value {
    let python = venv_python(&["mcp"]);
    let mut cmd = Command::new(&python);
    cmd.arg(repo().join("tests/interop/gateway_client.py"))
        .args([
            "--protocol",
            protocol,
            "--deadline",
            "240",
            "--request-timeout",
            "90",
        ])
        .args(["--sampling-tool", "everything__trigger-sampling-request"])
        .args(["--sample-text", SAMPLED])
        .env("TOOLYARD_CACHE", cache());
    // Settings from the caller's environment must not change the stdio gateway.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TOOLYARD_") && key != "TOOLYARD_CACHE" {
            cmd.env_remove(key);
        }
    }
    for prefix in SOURCES {
        cmd.args(["--prefix", prefix]);
    }
    for (name, args, want) in fixture.calls() {
        cmd.arg("--call").arg(name).arg(args.to_string()).arg(want);
    }
    let how = match via {
        Via::Http(url) => {
            cmd.args(["--url", url]);
            "Streamable HTTP"
        }
        Via::Stdio => {
            cmd.args(["--", env!("CARGO_BIN_EXE_toolyard"), "serve", "--config"])
                .arg(fixture.config())
                .arg("--stdio");
            "stdio"
        }
    };
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "gateway_client.py printed no report (exit {:?}); stderr:\n{stderr}",
                out.status
            )
        });
    let failed: Vec<&Value> = report["checks"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["ok"] != true).collect())
        .unwrap_or_default();
    assert!(
        out.status.success() && report["ok"] == true && failed.is_empty(),
        "gateway_client.py --protocol {protocol} over {how}: failed checks {failed:#?}\n\
         stderr:\n{stderr}"
    );
    check_report(fixture, protocol, how, &report);
    report
}

/// What every run must have seen, beyond its own checks.
fn check_report(fixture: &Fixture, protocol: &str, how: &str, report: &Value) {
    let ctx = format!("{protocol} over {how}");
    let want_version = if protocol == "modern" {
        "2026-07-28"
    } else {
        "2025-11-25"
    };
    assert_eq!(report["protocolVersion"], want_version, "{ctx}: {report}");
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let calls = fixture.calls();
    // connect, tools/list, one per call, sampling.
    assert_eq!(names.len(), 3 + calls.len(), "{ctx}: {names:?}");

    // Every source's tools, under its own prefix.
    for (prefix, tools) in [
        (
            "everything",
            &["echo", "trigger-sampling-request", "get-sum"][..],
        ),
        (
            "everything_t",
            &["echo", "trigger-sampling-request", "get-sum"],
        ),
        ("everything_http", &["echo", "get-sum"]),
        (
            "fs",
            &[
                "list_allowed_directories",
                "list_directory",
                "read_text_file",
            ],
        ),
        ("time", &["get_current_time", "convert_time"]),
        ("git", &["git_status", "git_log", "git_diff_unstaged"]),
    ] {
        let listed: Vec<&str> = report["tools"][prefix]
            .as_array()
            .unwrap_or_else(|| panic!("{ctx}: no tools of {prefix}: {}", report["tools"]))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for tool in tools {
            let name = format!("{prefix}__{tool}");
            assert!(
                listed.contains(&name.as_str()),
                "{ctx}: {name} not in {listed:?}"
            );
        }
    }

    // Each call answered by its own source (the gateway's `_meta` says which).
    for (name, _, want) in &calls {
        let call = &report["calls"][name];
        let source = name.split("__").next().unwrap();
        assert_eq!(call["source"], source, "{ctx}: {name}: {call}");
        assert_eq!(call["isError"], false, "{ctx}: {name}: {call}");
        assert!(
            call["text"].as_str().unwrap_or("").contains(want.as_str()),
            "{ctx}: {name}: {call}"
        );
    }

    // The upstream's sampling request reached the Python client once, and its answer
    // reached the upstream (server-everything prints the result it got).
    let samplings = report["samplings"].as_array().expect("samplings");
    assert_eq!(samplings.len(), 1, "{ctx}: {samplings:?}");
    assert_eq!(
        samplings[0]["systemPrompt"], "You are a helpful test server.",
        "{ctx}: {}",
        samplings[0]
    );
    let sampled = &report["calls"]["everything__trigger-sampling-request"];
    assert_eq!(sampled["source"], "everything", "{ctx}: {sampled}");
    let text = sampled["text"].as_str().unwrap_or("");
    assert!(
        text.contains(SAMPLED) && text.contains(MODEL),
        "{ctx}: {text}"
    );
}

/// Both manifests name the pinned version npx must find in the cache.
fn check_manifests() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gateway");
    for file in [
        "everything-plugin/plugin.json",
        "everything-registry/server.json",
    ] {
        let text = std::fs::read_to_string(fixtures.join(file)).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["packages"][0]["version"], EVERYTHING_VERSION, "{file}");
    }
    let installed: Value = serde_json::from_str(
        &std::fs::read_to_string(installed(
            "npm/node_modules/@modelcontextprotocol/server-everything/package.json",
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        installed["version"], EVERYTHING_VERSION,
        "the cache holds another server-everything: run scripts/install-test-deps"
    );
}

#[test]
fn python_sdk_through_the_gateway_over_streamable_http_in_both_generations() {
    check_manifests();
    let fixture = Fixture::new("http");
    let gateway = Server::start(
        env!("CARGO_BIN_EXE_toolyard"),
        &["serve", "--config", fixture.config()],
    );
    let url = gateway.url();
    for protocol in ["legacy", "modern"] {
        run_client(&fixture, protocol, Via::Http(&url));
    }
    // The singleton plugin runs through npx (the manifest's runtime hint), not node.
    let running = tagged(&fixture.tag);
    let npx = format!("@modelcontextprotocol/server-everything@{EVERYTHING_VERSION} stdio");
    assert!(
        running
            .iter()
            .any(|(_, cmd)| cmd.starts_with("npm exec") && cmd.contains(&npx)),
        "no `npm exec {npx}` among the gateway's upstream processes: {running:#?}"
    );
    // SIGTERM: the gateway drains, stops every source and exits.
    let pid = gateway.pid() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signal the gateway");
    let deadline = Instant::now() + WAIT;
    while !is_zombie(pid) {
        assert!(
            Instant::now() < deadline,
            "the gateway did not exit within {WAIT:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = leftovers(&fixture.tag, Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "upstream processes outlived the gateway's SIGTERM shutdown: {left:#?}"
    );
}

#[test]
fn python_sdk_through_the_gateway_over_stdio_in_both_generations() {
    check_manifests();
    let fixture = Fixture::new("stdio");
    for protocol in ["legacy", "modern"] {
        run_client(&fixture, protocol, Via::Stdio);
        // The SDK closed the gateway's stdin: the gateway stopped its sources.
        let left = leftovers(&fixture.tag, Duration::from_secs(10));
        assert!(
            left.is_empty(),
            "{protocol}: upstream processes outlived the stdio gateway: {left:#?}"
        );
    }
}
