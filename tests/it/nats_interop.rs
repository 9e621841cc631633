//! The official MCP SDK clients (Python `mcp`, TypeScript v1 and v2) through the NATS bridge:
//! `toolyard serve --nats` over Streamable HTTP (and HTTP+SSE), its `[nats] separator` empty
//! so the workers' tools keep their own names, in front of two `toolyard worker` processes of
//! one name on a real nats-server — as the README's example runs them, with no state secret.
//! Each client runs its whole demo profile (tools, elicitation, sampling, roots, progress,
//! logging, cancellation, resources, templates, prompts, completion), every request of it
//! crossing the bus.
//!
//! A multi-round call's retry goes to the name's queue group and may land on the other
//! worker: before the workers shared a state key through the bus (`TY_STATE_KEYS`), about
//! every other elicitation, sampling or roots call failed there "Invalid requestState:
//! integrity check failed". `a_multi_round_call_whose_retry_lands_on_another_worker_opens_there`
//! pins it without chance: the retry can only reach the second worker.

use crate::client_interop::TempDir;
use crate::nats::{ready_worker, wait_for_status};
use serde_json::json;
use toolyard_testkit::{run_client, NatsServer, ServerProcess, Target};

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

/// Runs `script`'s demo profile against a gateway exposing, unprefixed, the tools of two
/// workers named `demo` (the demo set), once it is ready (`/readyz`: it has the catalog).
async fn demo_through_nats(script: &'static str, protocol: &'static str, transport: &'static str) {
    let nats = NatsServer::start();
    let url = nats.url();
    let _workers = tokio::task::spawn_blocking(move || {
        [ready_worker(&url, "demo"), ready_worker(&url, "demo")]
    })
    .await
    .unwrap();
    let dir = TempDir::new("nats-interop");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!("[nats]\nurl = {:?}\nseparator = \"\"\n", nats.url()),
    )
    .unwrap();
    let gateway = tokio::task::spawn_blocking(move || {
        ServerProcess::start(BIN, &["serve", "--config", config.to_str().unwrap()])
    })
    .await
    .unwrap();
    wait_for_status(&format!("{}/readyz", gateway.base_url()), 200).await;
    let url = gateway.url();
    tokio::task::spawn_blocking(move || {
        run_client(
            script,
            "demo",
            protocol,
            Target::Url {
                url: &url,
                transport,
            },
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_legacy_passes_the_demo_profile_through_two_nats_workers() {
    demo_through_nats("python_client.py", "legacy", "http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_modern_passes_the_demo_profile_through_two_nats_workers() {
    demo_through_nats("python_client.py", "modern", "http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http_sse_passes_the_demo_profile_through_two_nats_workers() {
    demo_through_nats("python_client.py", "legacy", "sse").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_v1_legacy_passes_the_demo_profile_through_two_nats_workers() {
    demo_through_nats("ts_v1_client.mjs", "legacy", "http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_client_v2_legacy_passes_the_demo_profile_through_two_nats_workers() {
    demo_through_nats("ts_v2_client.mjs", "legacy", "http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_client_v2_modern_passes_the_demo_profile_through_two_nats_workers() {
    demo_through_nats("ts_v2_client.mjs", "modern", "http").await;
}

/// A forwarded multi-round call whose second round reaches another worker: the gateway
/// sends `ask_name`'s first round to the only worker there is, which asks for a name; while
/// the gateway asks its caller (a 2025-11-25 client: a server-to-client elicitation), the
/// caller's handler kills that worker and starts another of the name; the gateway sends the
/// answer with the first worker's `requestState` to the second, which opens it: neither was
/// given a secret, and they share the one the first wrote to the bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_round_call_whose_retry_lands_on_another_worker_opens_there() {
    use std::sync::{Arc, Mutex};
    use toolyard::client::{
        elicit_handler, ClientBuilder, ProtocolChoice, StreamableHttpTransport,
    };
    use toolyard::proto::{ElicitAction, ElicitResult, Implementation, ProtocolVersion};
    let nats = NatsServer::start();
    let url = nats.url();
    let first = tokio::task::spawn_blocking(move || ready_worker(&url, "pool"))
        .await
        .unwrap();
    let url = nats.url();
    let gateway =
        tokio::task::spawn_blocking(move || ServerProcess::start(BIN, &["serve", "--nats", &url]))
            .await
            .unwrap();
    wait_for_status(&format!("{}/readyz", gateway.base_url()), 200).await;
    // The first worker until the question comes, then the second.
    let workers = Arc::new(Mutex::new(vec![first]));
    let swap = workers.clone();
    let url = nats.url();
    let client = ClientBuilder::new(Implementation::new("t", "1"))
        .protocol(ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25))
        .on_elicit(elicit_handler(move |_| {
            let (swap, url) = (swap.clone(), url.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let mut workers = swap.lock().unwrap();
                    workers.clear(); // SIGKILL: the next round cannot go back to it
                    workers.push(ready_worker(&url, "pool"));
                })
                .await
                .unwrap();
                let mut answer = ElicitResult::new(ElicitAction::Accept);
                answer.content = Some(json!({"name": "Ada"}).as_object().unwrap().clone());
                Ok(answer)
            }
        }))
        .connect(StreamableHttpTransport::new(gateway.url()))
        .await
        .unwrap();
    let result = client.call_tool("pool__ask_name", json!({})).await.unwrap();
    let result = serde_json::to_value(&result).unwrap();
    assert_eq!(result["content"][0]["text"], "Hello, Ada!", "{result}");
    assert_eq!(workers.lock().unwrap().len(), 1, "the question came once");
}

/// Two gateways on one bus, as behind a load balancer: a 2026-07-28 caller gets `ask_name`'s
/// question from one and sends its answer to the other, which opens the state the first
/// sealed: gateways given no secret share the one the first wrote to the bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_rounds_retry_reaching_another_gateway_opens_there() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = tokio::task::spawn_blocking(move || ready_worker(&url, "pool"))
        .await
        .unwrap();
    let mut gateways = Vec::new();
    for _ in 0..2 {
        let url = nats.url();
        let gateway = tokio::task::spawn_blocking(move || {
            ServerProcess::start(BIN, &["serve", "--nats", &url])
        })
        .await
        .unwrap();
        wait_for_status(&format!("{}/readyz", gateway.base_url()), 200).await;
        gateways.push(gateway);
    }
    let call = json!({"name": "pool__ask_name", "arguments": {}});
    let asked = modern_call(&gateways[0].url(), "pool__ask_name", call.clone()).await;
    let asked = &asked["result"];
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let (key, _) = asked["inputRequests"]
        .as_object()
        .and_then(|requests| requests.iter().next())
        .expect("an input request");
    let mut retry = call;
    retry["inputResponses"] = json!({key: {"action": "accept", "content": {"name": "Ada"}}});
    retry["requestState"] = asked["requestState"].clone();
    let answered = modern_call(&gateways[1].url(), "pool__ask_name", retry).await;
    assert_eq!(
        answered["result"]["content"][0]["text"], "Hello, Ada!",
        "{answered}"
    );
}

/// One 2026-07-28 `tools/call` over HTTP from a caller that can answer an elicitation form;
/// the JSON-RPC response (the last message of an event stream, or the JSON body).
async fn modern_call(url: &str, tool: &str, mut params: serde_json::Value) -> serde_json::Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let text = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
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
