//! Tasks through the in-memory transport: the tasks extension of 2026-07-28 (SEP-2663) and
//! the experimental tasks of 2025-11-25 — creation, polling to completion, input, cancellation,
//! failures and status notifications.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use toolyard::proto::{ElicitRequestParams, ErrorObject, JsonObject, TaskSupport};
use toolyard::{tool_fn, HandlerError, RequestContext, Server, ServerBuilder};
use toolyard_testkit::{RawClient, RawClientError as ClientError};

const EXT: &str = "io.modelcontextprotocol/tasks";

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// `_meta` of a 2026-07-28 request declaring the tasks extension (and elicitation).
fn ext_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {EXT: {}}},
    })
}

/// `_meta` of a 2026-07-28 request without the extension.
fn plain_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

fn rpc_code(r: Result<Value, ClientError>) -> i32 {
    match r {
        Err(ClientError::Rpc(e)) => e.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

fn schema(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// Sets its flag when dropped: a cancelled task's future is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Fixture {
    server: Server,
    /// Releases `gated`.
    gate: Arc<Notify>,
    /// Set when `forever`'s future is dropped.
    saw_cancel: Arc<AtomicBool>,
}

async fn fixture() -> Fixture {
    let gate = Arc::new(Notify::new());
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let seen = saw_cancel.clone();
    let server = ServerBuilder::new("t", "0")
        .in_memory_tasks()
        .try_tool(
            tool_fn(
                "gated",
                "Finishes when the test says so",
                move |_c, _a: NoArgs| {
                    let g = g.clone();
                    async move {
                        g.notified().await;
                        Ok("released")
                    }
                },
            )
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(
            tool_fn("forever", "Runs until cancelled", move |_c, _a: NoArgs| {
                let dropped = DropFlag(seen.clone());
                async move {
                    let _dropped = dropped;
                    std::future::pending::<()>().await;
                    Ok("unreachable")
                }
            })
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(
            tool_fn("quick", "Answers at once", |_c, _a: NoArgs| async {
                Ok("quick result")
            })
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(
            tool_fn(
                "tool_error",
                "Fails with a tool error",
                |_c, _a: NoArgs| async { Err::<String, _>(HandlerError::failed("the job failed")) },
            )
            .map(|t| t.with_task_support(TaskSupport::Required)),
        )
        .try_tool(
            tool_fn(
                "protocol_error",
                "Fails with a JSON-RPC error",
                |_c, _a: NoArgs| async {
                    Err::<String, _>(HandlerError::Protocol(ErrorObject::internal("crashed")))
                },
            )
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(
            tool_fn("panics", "Panics", |_c, _a: NoArgs| async {
                if true {
                    panic!("task exploded");
                }
                Ok("unreachable")
            })
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(
            tool_fn(
                "confirm",
                "Asks for confirmation",
                |ctx: RequestContext, _a: NoArgs| async move {
                    let s = schema(json!({"type":"object","properties":{"ok":{"type":"boolean"}}}));
                    let r = ctx
                        .elicit("ok", ElicitRequestParams::form("Sure?", s))
                        .await?;
                    let ok = r.content.and_then(|c| c.get("ok").cloned());
                    Ok(format!("ok={}", json!(ok)))
                },
            )
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(
            tool_fn(
                "two_phase",
                "Asks (multi-round-trip), then becomes a task",
                |ctx: RequestContext, _a: NoArgs| async move {
                    let s =
                        schema(json!({"type":"object","properties":{"name":{"type":"string"}}}));
                    let r = ctx
                        .elicit("name", ElicitRequestParams::form("Name?", s))
                        .await?;
                    let name = r
                        .content
                        .and_then(|c| c.get("name").cloned())
                        .unwrap_or_default();
                    ctx.start_task().await;
                    let id = ctx.task_id().map(str::to_owned);
                    Ok(format!("name={name} task={}", id.is_some()))
                },
            )
            .map(|t| {
                t.with_task_support(TaskSupport::Required)
                    .with_deferred_task()
            }),
        )
        .try_tool(tool_fn("plain", "Never a task", |_c, _a: NoArgs| async {
            Ok("plain result")
        }))
        .start()
        .await
        .unwrap();
    Fixture {
        server,
        gate,
        saw_cancel,
    }
}

async fn call(client: &RawClient, tool: &str, meta: Value) -> Result<Value, ClientError> {
    client
        .request("tools/call", json!({"name": tool, "_meta": meta}))
        .await
}

async fn get(client: &RawClient, id: &str, meta: Value) -> Value {
    client
        .request("tasks/get", json!({"taskId": id, "_meta": meta}))
        .await
        .unwrap()
}

/// Polls `tasks/get` until the status is `want` (or terminal).
async fn poll(client: &RawClient, id: &str, meta: Value, want: &str) -> Value {
    for _ in 0..200 {
        let t = get(client, id, meta.clone()).await;
        let s = t["status"].as_str().unwrap_or_default().to_owned();
        if s == want || ["completed", "failed", "cancelled"].contains(&s.as_str()) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {id} never reached {want}");
}

/// The next notification with this method, skipping others.
async fn notification(client: &RawClient, method: &str) -> Value {
    client
        .next_notification_named(method)
        .await
        .unwrap_or_else(|| panic!("no {method} notification"))
}

// --- the tasks extension (2026-07-28)

#[tokio::test]
async fn tasks_extension_is_advertised_only_with_a_store() {
    let f = fixture().await;
    let client = RawClient::connect(&f.server).await.unwrap();
    let d = client
        .request("server/discover", json!({"_meta": plain_meta()}))
        .await
        .unwrap();
    assert_eq!(d["capabilities"]["extensions"][EXT], json!({}));
    assert!(d["capabilities"].get("tasks").is_none(), "{d}");

    let bare = ServerBuilder::new("t", "0").start().await.unwrap();
    let client = RawClient::connect(&bare).await.unwrap();
    let d = client
        .request("server/discover", json!({"_meta": plain_meta()}))
        .await
        .unwrap();
    assert!(d["capabilities"].get("extensions").is_none(), "{d}");
    let r = client
        .request("tasks/get", json!({"taskId": "x", "_meta": ext_meta()}))
        .await;
    assert_eq!(rpc_code(r), -32601);
}

#[tokio::test]
async fn tasks_extension_creates_polls_to_completion_and_notifies_listeners() {
    let f = fixture().await;
    let client = Arc::new(RawClient::connect(&f.server).await.unwrap());
    let created = call(&client, "gated", ext_meta()).await.unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working");
    assert!(created.get("task").is_none() && created.get("result").is_none());
    assert_eq!(created["ttlMs"], 3_600_000);
    assert_eq!(created["pollIntervalMs"], 500);
    assert!(created["createdAt"].as_str().unwrap().ends_with('Z'));
    let id = created["taskId"].as_str().unwrap().to_owned();

    let working = get(&client, &id, ext_meta()).await;
    assert_eq!(working["resultType"], "complete");
    assert_eq!(working["status"], "working");
    assert!(working.get("result").is_none());

    let c = client.clone();
    let listen_params = json!({"_meta": ext_meta(), "notifications": {"taskIds": [id]}});
    let _listen = tokio::spawn(async move {
        c.request_with_id("listen".into(), "subscriptions/listen", listen_params)
            .await
    });
    let ack = notification(&client, "notifications/subscriptions/acknowledged").await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));

    f.gate.notify_one();
    let n = notification(&client, "notifications/tasks").await;
    assert_eq!(n["params"]["taskId"], id.as_str());
    assert_eq!(n["params"]["status"], "completed");
    assert_eq!(n["params"]["result"]["content"][0]["text"], "released");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen"
    );

    let done = poll(&client, &id, ext_meta(), "completed").await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["content"][0]["text"], "released");
    assert!(
        done["result"]["_meta"].is_null(),
        "no related-task meta: {done}"
    );
}

#[tokio::test]
async fn tasks_extension_cancel_is_acknowledged_idempotent_and_stops_the_handler() {
    let f = fixture().await;
    let client = RawClient::connect(&f.server).await.unwrap();
    let id = call(&client, "forever", ext_meta()).await.unwrap()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let ack = client
        .request("tasks/cancel", json!({"taskId": id, "_meta": ext_meta()}))
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    assert_eq!(get(&client, &id, ext_meta()).await["status"], "cancelled");
    for _ in 0..100 {
        if f.saw_cancel.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        f.saw_cancel.load(Ordering::SeqCst),
        "the handler was dropped"
    );
    // The handler's late result does not revive the task; cancelling again is still an ack.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(get(&client, &id, ext_meta()).await["status"], "cancelled");
    let again = client
        .request("tasks/cancel", json!({"taskId": id, "_meta": ext_meta()}))
        .await
        .unwrap();
    assert_eq!(again, json!({"resultType": "complete"}));
    let unknown = client
        .request(
            "tasks/cancel",
            json!({"taskId": "nope", "_meta": ext_meta()}),
        )
        .await;
    assert_eq!(rpc_code(unknown), -32602);
}

#[tokio::test]
async fn tasks_extension_failures_and_gating() {
    let f = fixture().await;
    let client = RawClient::connect(&f.server).await.unwrap();

    // A tool error completes the task with isError; a JSON-RPC error or a panic fails it.
    let id = call(&client, "tool_error", ext_meta()).await.unwrap()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = poll(&client, &id, ext_meta(), "completed").await;
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["isError"], true);
    for (tool, message) in [("protocol_error", "crashed"), ("panics", "task exploded")] {
        let id = call(&client, tool, ext_meta()).await.unwrap()["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        let t = poll(&client, &id, ext_meta(), "failed").await;
        assert_eq!(t["status"], "failed", "{tool}: {t}");
        assert_eq!(t["error"]["code"], -32603);
        assert!(t["error"]["message"].as_str().unwrap().contains(message));
        assert!(t.get("result").is_none());
    }

    // Unknown ids are invalid params.
    let r = client
        .request("tasks/get", json!({"taskId": "nope", "_meta": ext_meta()}))
        .await;
    assert_eq!(rpc_code(r), -32602);

    // Without the extension: tasks/* are -32021, optional tools run synchronously, required
    // ones are -32021 naming the extension.
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let r = client
            .request(
                method,
                json!({"taskId": id, "inputResponses": {}, "_meta": plain_meta()}),
            )
            .await;
        assert_eq!(rpc_code(r), -32021, "{method}");
    }
    let sync = call(&client, "quick", plain_meta()).await.unwrap();
    assert_eq!(sync["resultType"], "complete");
    assert_eq!(sync["content"][0]["text"], "quick result");
    match call(&client, "tool_error", plain_meta()).await {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32021);
            assert_eq!(
                e.data.unwrap()["requiredCapabilities"]["extensions"][EXT],
                json!({})
            );
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    // A tool without task support never becomes a task, and a legacy hint changes nothing.
    let plain = client
        .request(
            "tools/call",
            json!({"name": "plain", "task": {"ttl": 1000}, "_meta": ext_meta()}),
        )
        .await
        .unwrap();
    assert_eq!(plain["resultType"], "complete");
    // The methods 2026-07-28 removed stay removed.
    for method in ["tasks/list", "tasks/result"] {
        let r = client
            .request(method, json!({"taskId": id, "_meta": ext_meta()}))
            .await;
        assert_eq!(rpc_code(r), -32601, "{method}");
    }
    // Listening for task status needs the extension too.
    let r = client
        .request(
            "subscriptions/listen",
            json!({"_meta": plain_meta(), "notifications": {"taskIds": [id]}}),
        )
        .await;
    assert_eq!(rpc_code(r), -32021);
}

#[tokio::test]
async fn tasks_extension_input_required_is_answered_with_tasks_update() {
    let f = fixture().await;
    let client = RawClient::connect(&f.server).await.unwrap();
    let id = call(&client, "confirm", ext_meta()).await.unwrap()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = poll(&client, &id, ext_meta(), "input_required").await;
    assert_eq!(t["status"], "input_required");
    assert_eq!(t["inputRequests"]["ok"]["method"], "elicitation/create");
    assert!(t.get("requestState").is_none());
    let ack = client
        .request(
            "tasks/update",
            json!({"taskId": id, "_meta": ext_meta(),
                   "inputResponses": {"ok": {"action": "accept", "content": {"ok": true}}, "stray": {}}}),
        )
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    let done = poll(&client, &id, ext_meta(), "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "ok=true");
}

#[tokio::test]
async fn tasks_extension_deferred_task_asks_first_then_becomes_a_task() {
    let f = fixture().await;
    let client = RawClient::connect(&f.server).await.unwrap();
    let round1 = call(&client, "two_phase", ext_meta()).await.unwrap();
    assert_eq!(round1["resultType"], "input_required", "{round1}");
    assert!(round1.get("taskId").is_none());
    let round2 = client
        .request(
            "tools/call",
            json!({"name": "two_phase", "_meta": ext_meta(),
                   "requestState": round1["requestState"],
                   "inputResponses": {"name": {"action": "accept", "content": {"name": "Alice"}}}}),
        )
        .await
        .unwrap();
    assert_eq!(round2["resultType"], "task", "{round2}");
    assert!(round2.get("requestState").is_none());
    let id = round2["taskId"].as_str().unwrap();
    let done = poll(&client, id, ext_meta(), "completed").await;
    assert_eq!(
        done["result"]["content"][0]["text"],
        "name=\"Alice\" task=true"
    );
}

// --- 2025-11-25 experimental tasks

async fn legacy_client(server: &Server) -> RawClient {
    let client = RawClient::connect(server).await.unwrap();
    let init = client.initialize(json!({"elicitation": {}})).await.unwrap();
    assert_eq!(
        init["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    assert!(init["capabilities"].get("extensions").is_none());
    client
}

async fn legacy_call(client: &RawClient, tool: &str) -> Result<Value, ClientError> {
    client
        .request("tools/call", json!({"name": tool, "task": {"ttl": 60_000}}))
        .await
}

#[tokio::test]
async fn legacy_tasks_create_poll_result_list_and_notify() {
    let f = fixture().await;
    let client = Arc::new(legacy_client(&f.server).await);
    let tools = client.request("tools/list", json!({})).await.unwrap();
    let gated = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "gated")
        .unwrap();
    assert_eq!(gated["execution"]["taskSupport"], "optional");

    let created = legacy_call(&client, "gated").await.unwrap();
    assert!(created.get("resultType").is_none());
    let task = &created["task"];
    assert_eq!(task["status"], "working");
    assert_eq!(task["ttl"], 60_000);
    assert_eq!(task["pollInterval"], 500);
    let id = task["taskId"].as_str().unwrap().to_owned();

    let polled = client
        .request("tasks/get", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(polled["status"], "working");
    assert!(polled.get("resultType").is_none());

    // tasks/result blocks until the task is done.
    let c = client.clone();
    let tid = id.clone();
    let result =
        tokio::spawn(async move { c.request("tasks/result", json!({"taskId": tid})).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !result.is_finished(),
        "tasks/result waits for a terminal status"
    );
    f.gate.notify_one();
    let result = result.await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "released");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );

    let n = notification(&client, "notifications/tasks/status").await;
    assert_eq!(n["params"]["taskId"], id.as_str());
    assert_eq!(n["params"]["status"], "completed");

    let list = client.request("tasks/list", json!({})).await.unwrap();
    let ids: Vec<_> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].clone())
        .collect();
    assert_eq!(ids, [json!(id)]);

    // Another connection neither lists nor reads this connection's tasks.
    let other = legacy_client(&f.server).await;
    let list = other.request("tasks/list", json!({})).await.unwrap();
    assert_eq!(list["tasks"], json!([]));
    let r = other.request("tasks/get", json!({"taskId": id})).await;
    assert_eq!(rpc_code(r), -32602);
}

#[tokio::test]
async fn legacy_tasks_cancel_failures_and_negotiation() {
    let f = fixture().await;
    let client = legacy_client(&f.server).await;

    let id = legacy_call(&client, "forever").await.unwrap()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancelled = client
        .request("tasks/cancel", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    let again = client.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(
        rpc_code(again),
        -32602,
        "a terminal task cannot be cancelled"
    );

    // 2025-11-25: a tool error fails the task, and tasks/result returns the tool's result.
    let id = legacy_call(&client, "tool_error").await.unwrap()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = client
        .request("tasks/result", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(r["isError"], true);
    let t = client
        .request("tasks/get", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(t["status"], "failed");

    // A JSON-RPC error is what tasks/result answers with.
    let id = legacy_call(&client, "protocol_error").await.unwrap()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = client.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(rpc_code(r), -32603);

    // Tool-level negotiation: required needs `task`, no support refuses it.
    let r = client
        .request("tools/call", json!({"name": "tool_error"}))
        .await;
    assert_eq!(rpc_code(r), -32601);
    let r = legacy_call(&client, "plain").await;
    assert_eq!(rpc_code(r), -32601);
    // Optional tools still answer directly without `task`.
    let r = client
        .request("tools/call", json!({"name": "quick"}))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "quick result");
    // tasks/update is not a 2025-11-25 method.
    let r = client
        .request("tasks/update", json!({"taskId": id, "inputResponses": {}}))
        .await;
    assert_eq!(rpc_code(r), -32601);
}

#[tokio::test]
async fn legacy_task_elicits_over_the_connection_with_related_task() {
    let f = fixture().await;
    let client = legacy_client(&f.server).await;
    let id = legacy_call(&client, "confirm").await.unwrap()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let req = client.next_request().await.unwrap();
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(
        req["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let t = client
        .request("tasks/get", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(t["status"], "input_required");
    client.respond(
        &req["id"],
        json!({"action": "accept", "content": {"ok": false}}),
    );
    let r = client
        .request("tasks/result", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "ok=false");
}

#[tokio::test]
async fn legacy_sessions_before_2025_11_25_get_no_tasks() {
    let f = fixture().await;
    let client = RawClient::connect(&f.server).await.unwrap();
    let init = client
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "old", "version": "0"}}),
        )
        .await
        .unwrap();
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    // The task hint is ignored: the call is answered directly.
    let r = legacy_call(&client, "quick").await.unwrap();
    assert_eq!(r["content"][0]["text"], "quick result");
}
