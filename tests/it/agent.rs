//! `toolyard agent`, the built binary run as a person would: a scripted OpenAI-compatible
//! model on 127.0.0.1 (a few lines of HTTP/1.1 speaking the real SSE stream) and our own demo
//! server over stdio as the config file's `[[clients]]` entry. The answer goes to stdout, the
//! tool calls and results to stderr, and the model is sent the exact conversation.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

/// One recorded request: its headers (lower-cased names) and JSON body.
type Recorded = (Vec<(String, String)>, Value);

/// A model that answers each request with the next of `replies` (SSE bodies).
struct FakeModel {
    url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn sse(chunks: &[Value]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

async fn fake_model(replies: Vec<String>) -> FakeModel {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    let replies = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut byte = [0u8; 4096];
            let (head_end, length) = loop {
                let n = stream.read(&mut byte).await.unwrap_or(0);
                if n == 0 {
                    break (None, 0);
                }
                buf.extend_from_slice(&byte[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    break (Some(i + 4), length);
                }
            };
            let Some(start) = head_end else { continue };
            while buf.len() < start + length {
                let n = stream.read(&mut byte).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&byte[..n]);
            }
            let headers = String::from_utf8_lossy(&buf[..start])
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned()))
                .collect();
            let body = serde_json::from_slice(&buf[start..]).unwrap_or(Value::Null);
            recorded.lock().unwrap().push((headers, body));
            let reply = replies.lock().unwrap().pop_front().unwrap_or_default();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n{reply}"
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    FakeModel {
        url,
        requests,
        task,
    }
}

/// The model calls `echo` once, then answers.
fn echo_then_answer() -> Vec<String> {
    vec![
        sse(&[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "echo", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"message\""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ":\"hi\"}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ]),
        sse(&[
            chunk(json!({"role": "assistant", "content": "The echo "}), None),
            chunk(json!({"content": "said hi."}), None),
            chunk(json!({}), Some("stop")),
        ]),
    ]
}

fn config(dir: &std::path::Path, base_url: &str) -> std::path::PathBuf {
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[agent]\nmodel = \"test-model\"\nbase_url = \"{base_url}\"\n\n\
             [[clients]]\nname = \"demo\"\ncommand = \"{BIN}\"\nargs = [\"serve\", \"--stdio\"]\n"
        ),
    )
    .unwrap();
    path
}

/// Runs `toolyard agent ARGS...` with a clean environment for the model settings.
async fn agent(args: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("agent")
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("RUST_BACKTRACE");
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("TOOLYARD_") || k.starts_with("OPENAI_") || k.starts_with("AZURE_OPENAI") {
            cmd.env_remove(&key);
        }
    }
    cmd.env("OPENAI_API_KEY", "sk-from-env");
    cmd.output().await.expect("run toolyard agent")
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolyard-agent-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_streams_the_answer_to_stdout_and_tool_calls_to_stderr() {
    let model = fake_model(echo_then_answer()).await;
    let dir = tempdir("oneshot");
    let file = config(&dir, &model.url);
    let out = agent(&["--config", file.to_str().unwrap(), "--yes", "Echo hi"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, "The echo said hi.\n");
    assert!(
        stderr.contains("[tool] demo/echo {\"message\":\"hi\"}"),
        "{stderr}"
    );
    assert!(stderr.contains("[result] demo/echo: hi"), "{stderr}");
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let (headers, first) = &requests[0];
    assert!(headers.contains(&("authorization".into(), "Bearer sk-from-env".into())));
    assert_eq!(first["model"], "test-model");
    assert_eq!(first["stream"], true);
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"add"),
        "{names:?}"
    );
    assert_eq!(
        requests[1].1["messages"],
        json!([
            {"role": "user", "content": "Echo hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "echo", "arguments": "{\"message\":\"hi\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "hi"}
        ])
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_without_yes_declines_a_tool_call_no_one_can_confirm() {
    let model = fake_model(echo_then_answer()).await;
    let dir = tempdir("confirm");
    let file = config(&dir, &model.url);
    let out = agent(&["--config", file.to_str().unwrap(), "Echo hi"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("declined (stdin is not a terminal; --yes allows it)"),
        "{stderr}"
    );
    assert!(!stderr.contains("[tool] demo/echo"), "{stderr}");
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(
        requests[1].1["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "Error: the user declined this tool call"})
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn agent_without_a_model_says_how_to_name_one() {
    let dir = tempdir("nomodel");
    let path = dir.join("agent.toml");
    std::fs::write(&path, "[agent]\nbase_url = \"http://127.0.0.1:9/v1\"\n").unwrap();
    let out = agent(&["--config", path.to_str().unwrap(), "hi"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no model: set `model` in [agent] or pass --model"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A third-party server: server-everything (installed by scripts/test), whose tools are
/// read-only and so need no confirmation, with JSON Schema draft-07 `$schema`s the agent drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_calls_server_everythings_tools_in_parallel_without_confirmation() {
    let everything = crate::client_interop::installed(
        "npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    let model = fake_model(vec![
        sse(&[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_e", "type": "function",
                "function": {"name": "echo", "arguments": "{\"message\":\"hi\"}"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_s", "type": "function",
                "function": {"name": "get-sum", "arguments": "{\"a\":2,\"b\":3}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ]),
        sse(&[
            chunk(json!({"role": "assistant", "content": "hi, and 5"}), None),
            chunk(json!({}), Some("stop")),
        ]),
    ])
    .await;
    let dir = tempdir("everything");
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[agent]\nmodel = \"test-model\"\nbase_url = \"{}\"\ntools = [\"everything/echo\", \"everything/get-sum\"]\n\n\
             [[clients]]\nname = \"everything\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\ntimeout_ms = 60000\n",
            model.url,
            everything.display()
        ),
    )
    .unwrap();
    let out = agent(&[
        "--config",
        path.to_str().unwrap(),
        "Echo hi and add 2 and 3",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, "hi, and 5\n");
    assert!(!stderr.contains("declined"), "{stderr}");
    let requests = model.requests.lock().unwrap().clone();
    let tools = requests[0].1["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 2);
    assert!(tools
        .iter()
        .all(|t| t["function"]["parameters"].get("$schema").is_none()));
    let messages = requests[1].1["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_e", "content": "Echo: hi"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_s", "content": "The sum of 2 and 3 is 5."})
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn text_reply(text: &str) -> String {
    sse(&[
        chunk(json!({"role": "assistant", "content": text}), None),
        chunk(json!({}), Some("stop")),
    ])
}

/// The interactive session, in a pseudo-terminal (util-linux `script`): each prompt is sent
/// with the conversation so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_in_a_terminal_without_a_prompt_keeps_the_conversation() {
    let model = fake_model(vec![text_reply("Hello Ada."), text_reply("You are Ada.")]).await;
    let dir = tempdir("interactive");
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[agent]\nmodel = \"test-model\"\nbase_url = \"{}\"\n",
            model.url
        ),
    )
    .unwrap();
    let line = format!("'{BIN}' agent --config '{}'", path.display());
    let mut cmd = tokio::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .env("OPENAI_API_KEY", "sk-tty");
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("TOOLYARD_")
            || k.starts_with("OPENAI_BASE")
            || k.starts_with("AZURE_OPENAI")
        {
            cmd.env_remove(&key);
        }
    }
    let mut child = cmd.spawn().expect("run script(1)");
    let mut stdin = child.stdin.take().unwrap();
    // One line at a time, each after the previous answer, as a person types.
    for (n, text) in ["I am Ada\n", "Who am I?\n"].iter().enumerate() {
        stdin.write_all(text.as_bytes()).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while model.requests.lock().unwrap().len() <= n {
            assert!(std::time::Instant::now() < deadline, "no request {n}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stdin.write_all(b"/exit\n").await.unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the session ends on /exit")
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("You are Ada."), "{shown}");
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(
        requests[1].1["messages"],
        json!([
            {"role": "user", "content": "I am Ada"},
            {"role": "assistant", "content": "Hello Ada."},
            {"role": "user", "content": "Who am I?"}
        ])
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// With an OTLP endpoint the agent's run is one trace: `invoke_agent toolyard` with a
/// `chat {model}` CLIENT span per model request (the GenAI attributes: provider, models,
/// tokens, finish reasons) and an `execute_tool echo` span whose child is the MCP client's
/// `tools/call echo`, itself the parent of the demo server's SERVER span in its own process;
/// the chats' duration and token histograms are exported too.
#[cfg(feature = "otel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_with_an_otlp_endpoint_exports_its_chats_and_tool_calls_as_one_trace() {
    use toolyard_testkit::{OtlpReceiver, ReceivedSpan};
    let receiver = OtlpReceiver::start();
    let mut replies = echo_then_answer();
    // The fake reports usage on the first answer (the usage chunk of `include_usage`).
    replies[0] = replies[0].replace(
        "data: [DONE]",
        &format!(
            "data: {}\n\ndata: [DONE]",
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}})
        ),
    );
    let model = fake_model(replies).await;
    let dir = tempdir("otel");
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[agent]\nmodel = \"test-model\"\nbase_url = \"{}\"\n\n\
             [[clients]]\nname = \"demo\"\ncommand = \"{BIN}\"\n\
             args = [\"serve\", \"--stdio\", \"--otel-endpoint\", \"{}\"]\n",
            model.url,
            receiver.url()
        ),
    )
    .unwrap();
    let out = agent(&[
        "--config",
        path.to_str().unwrap(),
        "--yes",
        "--otel-endpoint",
        &receiver.url(),
        "Echo hi",
    ])
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "The echo said hi.\n");
    let spans = tokio::task::spawn_blocking(move || {
        let spans = receiver.wait_for_spans(std::time::Duration::from_secs(20), |s| {
            s.iter().filter(|s| s.name == "chat test-model").count() == 2
                && s.iter().any(|s| s.name == "invoke_agent toolyard")
                && s.iter().filter(|s| s.name == "tools/call echo").count() == 2
        });
        (spans, receiver.points())
    })
    .await
    .unwrap();
    let (spans, points) = spans;
    let one = |name: &str, kind: i32| -> ReceivedSpan {
        spans
            .iter()
            .find(|s| s.name == name && s.kind == kind)
            .unwrap_or_else(|| panic!("no {name} span of kind {kind}: {spans:#?}"))
            .clone()
    };
    let run = one("invoke_agent toolyard", 1);
    assert_eq!(run.parent_span_id, "", "the run is the trace's root");
    let chats: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "chat test-model")
        .collect();
    for chat in &chats {
        assert_eq!(chat.kind, 3, "a chat is a CLIENT span");
        assert_eq!(chat.trace_id, run.trace_id);
        assert_eq!(chat.parent_span_id, run.span_id);
        let a = &chat.attributes;
        for (key, value) in [
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.system", "openai"),
            ("gen_ai.request.model", "test-model"),
            ("gen_ai.response.model", "m"),
            ("server.address", "127.0.0.1"),
        ] {
            assert_eq!(a.get(key).map(String::as_str), Some(value), "{key}: {a:?}");
        }
    }
    let first = chats
        .iter()
        .find(|c| c.attributes.contains_key("gen_ai.usage.input_tokens"))
        .expect("the first chat reports its usage");
    assert_eq!(first.attributes["gen_ai.usage.input_tokens"], "21");
    assert_eq!(first.attributes["gen_ai.usage.output_tokens"], "7");
    assert!(
        first.attributes["gen_ai.response.finish_reasons"].contains("\"tool_calls\""),
        "{:?}",
        first.attributes
    );
    assert!(chats.iter().any(|c| c
        .attributes
        .get("gen_ai.response.finish_reasons")
        .is_some_and(|r| r.contains("\"stop\""))));
    let tool = one("execute_tool echo", 1);
    assert_eq!(tool.trace_id, run.trace_id);
    assert_eq!(tool.parent_span_id, run.span_id);
    assert_eq!(tool.attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool.attributes["gen_ai.tool.name"], "echo");
    assert_eq!(tool.attributes["gen_ai.tool.call.id"], "call_1");
    let client = one("tools/call echo", 3);
    assert_eq!(client.trace_id, run.trace_id);
    assert_eq!(client.parent_span_id, tool.span_id);
    let server = one("tools/call echo", 2);
    assert_eq!(server.trace_id, run.trace_id);
    assert_eq!(server.parent_span_id, client.span_id);
    assert_ne!(server.service, client.service, "two processes");
    assert!(
        points
            .iter()
            .any(|p| p.metric == "gen_ai.client.operation.duration"
                && p.unit == "s"
                && p.attributes.get("gen_ai.request.model").map(String::as_str)
                    == Some("test-model")
                && p.count == 2),
        "{points:#?}"
    );
    for kind in ["input", "output"] {
        assert!(
            points
                .iter()
                .any(|p| p.metric == "gen_ai.client.token.usage"
                    && p.attributes.get("gen_ai.token.type").map(String::as_str) == Some(kind)),
            "{points:#?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
