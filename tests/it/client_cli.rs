//! `toolyard client`, the built binary run as a person or a script would: against
//! `toolyard serve --stdio` (spawned by the client) and `toolyard serve --http` (started
//! here). Results are JSON on stdout, errors a message on stderr and exit code 1.

use serde_json::Value;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

/// The `--stdio` command line that runs our own demo server.
fn serve_stdio() -> String {
    format!("'{BIN}' serve --stdio")
}

/// Runs `toolyard client ARGS...` with none of the caller's `TOOLYARD_*` settings (a bearer
/// token or log filter there must not change what the test sees), and no backtraces in its
/// error messages.
fn client(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("client")
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TOOLYARD_") {
            cmd.env_remove(key);
        }
    }
    cmd.output().expect("run toolyard client")
}

fn stdio(args: &[&str]) -> Output {
    let line = serve_stdio();
    let mut all = vec!["--stdio", line.as_str()];
    all.extend_from_slice(args);
    client(&all)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stdout as JSON, after checking the exit code is `ok` (success or not).
fn json_out(out: &Output, ok: bool, what: &str) -> Value {
    assert_eq!(
        out.status.success(),
        ok,
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// A failure: exit code 1, nothing on stdout, and a message on stderr that contains `needle`.
fn fails_with(out: &Output, needle: &str, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: exit {:?}\nstderr:\n{}",
        out.status,
        stderr(out)
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: printed on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr(out).contains(needle),
        "{what}: stderr does not mention {needle:?}:\n{}",
        stderr(out)
    );
}

fn tool_names(v: &Value) -> Vec<&str> {
    v["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools array: {v}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

#[test]
fn info_over_stdio_in_both_generations() {
    let modern = json_out(&stdio(&["info"]), true, "info");
    assert_eq!(modern["protocolVersion"], "2026-07-28", "{modern}");
    assert_eq!(modern["serverInfo"]["name"], "toolyard", "{modern}");
    assert!(modern["capabilities"]["tools"].is_object(), "{modern}");
    let legacy = json_out(
        &stdio(&["--protocol", "2025-11-25", "info"]),
        true,
        "info --protocol 2025-11-25",
    );
    assert_eq!(legacy["protocolVersion"], "2025-11-25", "{legacy}");
}

#[test]
fn tools_over_stdio() {
    let v = json_out(&stdio(&["tools"]), true, "tools");
    let names = tool_names(&v);
    for t in ["echo", "add", "fail", "ask_name"] {
        assert!(names.contains(&t), "{t} not in {names:?}");
    }
    let echo = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap();
    assert_eq!(echo["inputSchema"]["type"], "object", "{echo}");
}

#[test]
fn call_over_stdio() {
    let v = json_out(
        &stdio(&["call", "echo", "--args", r#"{"message":"hi"}"#]),
        true,
        "call echo",
    );
    assert_eq!(v["content"][0]["type"], "text", "{v}");
    assert_eq!(v["content"][0]["text"], "hi", "{v}");
    assert_ne!(v["isError"], true, "{v}");
    let sum = json_out(
        &stdio(&["call", "add", "--args", r#"{"a":2,"b":3}"#]),
        true,
        "call add",
    );
    assert_eq!(sum["structuredContent"]["sum"], 5.0, "{sum}");
}

#[test]
fn read_prompts_and_get_prompt_over_stdio() {
    let read = json_out(&stdio(&["read", "demo://readme"]), true, "read");
    assert_eq!(read["contents"][0]["uri"], "demo://readme", "{read}");
    assert!(
        read["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Toolyard demo")),
        "{read}"
    );
    let prompts = json_out(&stdio(&["prompts"]), true, "prompts");
    let names: Vec<&str> = prompts["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("no prompts array: {prompts}"))
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names.contains(&"greet") && names.contains(&"code_review"),
        "{names:?}"
    );
    let greet = json_out(
        &stdio(&["get-prompt", "greet", "--args", r#"{"name":"Ada"}"#]),
        true,
        "get-prompt greet",
    );
    assert_eq!(greet["messages"][0]["role"], "user", "{greet}");
    assert_eq!(
        greet["messages"][0]["content"]["text"], "Please greet Ada warmly.",
        "{greet}"
    );
    let resources = json_out(&stdio(&["resources"]), true, "resources");
    assert!(
        resources["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["uri"] == "demo://readme")),
        "{resources}"
    );
    let templates = json_out(&stdio(&["templates"]), true, "templates");
    assert!(
        templates["resourceTemplates"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["uriTemplate"] == "demo://users/{id}")),
        "{templates}"
    );
}

#[test]
fn a_failing_tool_prints_its_result_and_exits_non_zero() {
    let out = stdio(&["call", "fail"]);
    let v = json_out(&out, false, "call fail");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(v["isError"], true, "{v}");
    assert_eq!(v["content"][0]["text"], "this tool always fails", "{v}");
    assert!(
        stderr(&out).contains("isError"),
        "stderr does not say the tool failed:\n{}",
        stderr(&out)
    );
}

#[test]
fn bad_arguments_are_a_clear_error() {
    fails_with(
        &stdio(&["call", "echo", "--args", "{not json"]),
        "--args is not valid JSON",
        "--args {not json",
    );
    fails_with(
        &stdio(&["call", "echo", "--args", r#"["hi"]"#]),
        "--args must be a JSON object",
        "--args [\"hi\"]",
    );
    fails_with(
        &stdio(&["get-prompt", "greet", "--args", "nope"]),
        "--args is not valid JSON",
        "get-prompt --args nope",
    );
}

#[test]
fn a_server_command_that_does_not_exist_is_named_in_the_error() {
    let missing = "toolyard-no-such-server-4711";
    let out = client(&["--stdio", missing, "tools"]);
    fails_with(&out, missing, "--stdio of a missing command");
    let missing_path = "/nonexistent/toolyard/server";
    let out = client(&["--stdio", missing_path, "tools"]);
    fails_with(&out, missing_path, "--stdio of a missing path");
}

#[test]
fn an_unknown_tool_is_an_error() {
    let out = stdio(&["call", "no_such_tool"]);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", stderr(&out));
    assert!(
        stderr(&out).contains("no_such_tool"),
        "stderr does not name the tool:\n{}",
        stderr(&out)
    );
}

#[test]
fn tools_and_call_over_http_and_sse() {
    let server = toolyard_testkit::ServerProcess::start(BIN, &["serve"]);
    let url = server.url();
    let tools = json_out(&client(&["--url", &url, "tools"]), true, "--url tools");
    assert!(tool_names(&tools).contains(&"echo"), "{tools}");
    let echoed = json_out(
        &client(&[
            "--url",
            &url,
            "call",
            "echo",
            "--args",
            r#"{"message":"over http"}"#,
        ]),
        true,
        "--url call echo",
    );
    assert_eq!(echoed["content"][0]["text"], "over http", "{echoed}");
    let legacy = json_out(
        &client(&["--url", &url, "--protocol", "2025-06-18", "info"]),
        true,
        "--url info --protocol 2025-06-18",
    );
    assert_eq!(legacy["protocolVersion"], "2025-06-18", "{legacy}");
    let failed = client(&["--url", &url, "call", "fail"]);
    let v = json_out(&failed, false, "--url call fail");
    assert_eq!(v["isError"], true, "{v}");

    let sse = url.replace("/mcp", "/sse");
    let tools = json_out(
        &client(&["--url", &sse, "--sse", "tools"]),
        true,
        "--sse tools",
    );
    assert!(tool_names(&tools).contains(&"echo"), "{tools}");
    let echoed = json_out(
        &client(&[
            "--url",
            &sse,
            "--sse",
            "call",
            "echo",
            "--args",
            r#"{"message":"over sse"}"#,
        ]),
        true,
        "--sse call echo",
    );
    assert_eq!(echoed["content"][0]["text"], "over sse", "{echoed}");
}

#[test]
fn a_url_where_nothing_listens_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // Nothing listens there once the listener above is dropped.
    let url = format!("http://127.0.0.1:{port}/mcp");
    let out = client(&["--url", &url, "--timeout-ms", "10000", "tools"]);
    fails_with(
        &out,
        "connecting to the server",
        "--url with nothing listening",
    );
}
