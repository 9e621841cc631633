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
    client_with_env(args, &[])
}

/// [`client`] with these variables added to its environment.
fn client_with_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
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
    cmd.envs(envs.iter().copied());
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
    let closed = toolyard_testkit::ClosedPort::new();
    let port = closed.port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let out = client(&["--url", &url, "--timeout-ms", "10000", "tools"]);
    fails_with(
        &out,
        "connecting to the server",
        "--url with nothing listening",
    );
}

/// `RUST_BACKTRACE=1` (common on developers' machines) must not turn an ordinary error into a
/// backtrace: every error is the one line `error: <message>: <cause>...` and exit code 1.
#[test]
fn errors_are_one_line_even_with_rust_backtrace_set() {
    let closed = toolyard_testkit::ClosedPort::new();
    let port = closed.port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let missing = std::env::temp_dir().join("toolyard-no-such-config.toml");
    let runs: [(&str, Vec<String>); 2] = [
        (
            "a refused connection",
            vec!["client".into(), "--url".into(), url, "tools".into()],
        ),
        (
            "a config file that does not exist",
            vec![
                "serve".into(),
                "--stdio".into(),
                "--config".into(),
                missing.display().to_string(),
            ],
        ),
    ];
    for (what, args) in runs {
        let out = Command::new(BIN)
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run toolyard");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(
            lines.len(),
            1,
            "{what}: more than one line on stderr:\n{err}"
        );
        assert!(lines[0].starts_with("error: "), "{what}: {err}");
        assert!(!err.to_lowercase().contains("backtrace"), "{what}: {err}");
    }
}

/// `--url` at an HTTP+SSE endpoint works without `--sse`: the POST there is refused (405), so
/// the client opens the SSE stream at the same URL and carries on over the 2024-11-05
/// transport (the spec's backwards-compatibility procedure), whatever the first request is.
/// `--streamable-http` pins the new transport, and then the 405 is the error.
#[test]
fn a_url_at_an_http_sse_endpoint_falls_back_without_sse() {
    let server = toolyard_testkit::ServerProcess::start(BIN, &["serve"]);
    let sse = format!("{}/sse", server.base_url());
    let tools = json_out(&client(&["--url", &sse, "tools"]), true, "--url /sse tools");
    let names = tool_names(&tools);
    for t in ["echo", "add", "fail"] {
        assert!(names.contains(&t), "{t} not in {names:?}");
    }
    // The legacy handshake as the first request, and a call.
    let echoed = json_out(
        &client(&[
            "--url",
            &sse,
            "--protocol",
            "2024-11-05",
            "call",
            "echo",
            "--args",
            r#"{"message":"fell back"}"#,
        ]),
        true,
        "--url /sse --protocol 2024-11-05 call echo",
    );
    assert_eq!(echoed["content"][0]["text"], "fell back", "{echoed}");
    // A modern first request (server/discover pinned to 2026-07-28) falls back as well.
    let info = json_out(
        &client(&["--url", &sse, "--protocol", "2026-07-28", "info"]),
        true,
        "--url /sse --protocol 2026-07-28 info",
    );
    assert_eq!(info["serverInfo"]["name"], "toolyard", "{info}");
    // The Streamable HTTP endpoint stays on Streamable HTTP, pinned or not.
    let mcp = server.url();
    for pin in [&[][..], &["--streamable-http"][..]] {
        let mut args = vec!["--url", mcp.as_str()];
        args.extend_from_slice(pin);
        args.push("tools");
        let tools = json_out(&client(&args), true, "--url /mcp tools");
        assert!(tool_names(&tools).contains(&"echo"), "{tools}");
    }
    fails_with(
        &client(&["--url", &sse, "--streamable-http", "tools"]),
        "405",
        "--url /sse --streamable-http",
    );
}

/// A URL that answers 404 to the POST and to the GET: the error names both attempts.
#[test]
fn a_url_with_neither_http_transport_names_both_attempts() {
    let server = toolyard_testkit::ServerProcess::start(BIN, &["serve"]);
    let url = format!("{}/no-such-endpoint", server.base_url());
    let out = client(&["--url", &url, "--timeout-ms", "10000", "tools"]);
    for needle in [
        "Streamable HTTP",
        "POST",
        "HTTP+SSE",
        "GET",
        "404",
        url.as_str(),
    ] {
        fails_with(&out, needle, "--url of a 404 endpoint");
    }
}

/// The stdio server's environment: `PATH`, `HOME`, the proxy and trust-store variables
/// (package managers behind a proxy or a private CA need them), what `--inherit-env` names,
/// and nothing else of ours; `--no-inherit-env-defaults` drops the proxy and trust-store ones.
#[test]
fn a_spawned_server_sees_proxy_and_trust_store_variables_and_nothing_else() {
    let server = format!(
        "{} -S {}/tests/fixtures/fault_server.py echo",
        if std::path::Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        },
        env!("CARGO_MANIFEST_DIR")
    );
    let ours = [
        ("HTTPS_PROXY", "http://proxy.invalid:3128"),
        ("https_proxy", "http://proxy.invalid:3128"),
        ("NO_PROXY", "localhost,127.0.0.1"),
        ("SSL_CERT_FILE", "/etc/ssl/private-ca.pem"),
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/private-ca.pem"),
        ("IT_UNRELATED_SECRET", "hunter2"),
        ("IT_WANTED", "yes"),
    ];
    let env_of = |extra: &[&str]| -> Value {
        let mut args = vec!["--stdio", server.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["call", "env"]);
        let v = json_out(&client_with_env(&args, &ours), true, "call env");
        serde_json::from_str(v["content"][0]["text"].as_str().expect("text")).expect("JSON")
    };
    let env = env_of(&[]);
    for (k, v) in &ours[..5] {
        assert_eq!(env[k], *v, "{k} not passed through: {env}");
    }
    assert!(env.get("PATH").is_some(), "{env}");
    assert!(env.get("IT_UNRELATED_SECRET").is_none(), "leaked: {env}");
    assert!(env.get("IT_WANTED").is_none(), "leaked: {env}");

    let env = env_of(&["--inherit-env", "IT_WANTED"]);
    assert_eq!(env["IT_WANTED"], "yes", "{env}");
    assert_eq!(env["HTTPS_PROXY"], "http://proxy.invalid:3128", "{env}");
    assert!(env.get("IT_UNRELATED_SECRET").is_none(), "leaked: {env}");

    let env = env_of(&["--no-inherit-env-defaults", "--inherit-env", "IT_WANTED"]);
    assert_eq!(env["IT_WANTED"], "yes", "{env}");
    for (k, _) in &ours[..5] {
        assert!(
            env.get(k).is_none(),
            "{k} passed without the defaults: {env}"
        );
    }
    assert!(env.get("PATH").is_some(), "{env}");
}
