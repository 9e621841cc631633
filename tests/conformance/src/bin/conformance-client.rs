//! The MCP conformance suite's client under test: `conformance-client <server-url>`, with
//! `MCP_CONFORMANCE_SCENARIO`, `MCP_CONFORMANCE_CONTEXT` and (suite 0.2)
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` from the environment (`../shared/conformance`).
//!
//! It is an ordinary user of `toolyard::client`: it connects (with OAuth when the scenario
//! needs it), lists what the server offers and exercises it — the tool calls the context
//! names, or every listed tool with arguments made from its schema, every resource and every
//! prompt. Elicitation is accepted with the schema's defaults, sampling answered with a
//! fixed message, roots listed. Exit code 0 when everything it tried succeeded.

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};
use std::time::Duration;
use toolyard::client::StreamableHttpTransport;
use toolyard::client::{
    elicit_handler, fixed_roots, sample_handler, Client, ClientBuilder, ClientError, ProtocolChoice,
};
use toolyard::proto::{
    CreateMessageResult, ElicitAction, ElicitRequestParams, ElicitResult, Implementation,
    ProtocolVersion, Role, Root, SamplingMessageContent, SamplingMessageContentBlock, TextContent,
    Tool,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .next_back()
        .filter(|a| a.starts_with("http"))
        .context("usage: conformance-client <server-url>")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Option<Value> = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok());
    let protocol = match std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION")
        .ok()
        .as_deref()
    {
        Some("2026-07-28") | Some("draft") => ProtocolChoice::Modern,
        Some(v) => ProtocolChoice::Legacy(
            ProtocolVersion::parse(v).context("unknown MCP_CONFORMANCE_PROTOCOL_VERSION")?,
        ),
        None => ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    };
    eprintln!("conformance-client: scenario {scenario:?} at {url} ({protocol:?})");
    let mut transport = StreamableHttpTransport::new(url.clone());
    if let Some(auth) =
        toolyard_conformance::client_auth::oauth_for_scenario(&scenario, context.clone(), &url)
            .await?
    {
        transport = transport.auth(auth);
    }
    let client = ClientBuilder::new(Implementation::new("toolyard-conformance-client", "1.0.0"))
        .protocol(protocol)
        .request_timeout(Duration::from_secs(20))
        .on_elicit(elicit_handler(
            |p| async move { Ok(accept_with_defaults(&p)) },
        ))
        .on_sample(sample_handler(|_p| async {
            Ok(CreateMessageResult {
                role: Role::Assistant,
                content: SamplingMessageContent::Single(SamplingMessageContentBlock::Text(
                    TextContent::new("This is a sampled answer."),
                )),
                model: "toolyard-test-model".into(),
                stop_reason: Some("endTurn".into()),
                meta: None,
                result_type: None,
            })
        }))
        .on_roots(fixed_roots(vec![Root::new("file:///tmp", "tmp")]))
        .connect(transport)
        .await
        .context("connecting")?;
    let outcome = exercise(&client, &scenario, context.as_ref()).await;
    client.close().await;
    outcome
}

/// Accepts an elicitation, filling every field from its schema default (SEP-1034).
fn accept_with_defaults(params: &ElicitRequestParams) -> ElicitResult {
    let schema = serde_json::to_value(params).unwrap_or(Value::Null);
    let mut content = Map::new();
    if let Some(Value::Object(props)) = schema.pointer("/requestedSchema/properties") {
        for (name, prop) in props {
            if let Some(default) = prop.get("default") {
                content.insert(name.clone(), default.clone());
            }
        }
    }
    let mut answer = ElicitResult::new(ElicitAction::Accept);
    answer.content = Some(content);
    answer
}

/// Arguments for a tool from its schema: each required property gets a value of its type.
fn arguments_for(tool: &Tool) -> Value {
    let mut args = Map::new();
    let required: Vec<&str> = tool
        .input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let props = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    for name in required {
        let kind = props
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let value = match kind {
            "number" | "integer" => json!(1),
            "boolean" => json!(true),
            "array" => json!([]),
            "object" => json!({}),
            _ => json!("test"),
        };
        args.insert(name.to_owned(), value);
    }
    Value::Object(args)
}

async fn exercise(client: &Client, scenario: &str, context: Option<&Value>) -> anyhow::Result<()> {
    let caps = client.session().map(|s| s.capabilities).unwrap_or_default();
    let tools = client.list_all_tools().await.context("tools/list")?;
    let mut failures = Vec::new();
    // The calls the scenario names, else every tool; all at once (parallel calls must not
    // share state, SEP-2322).
    let calls: Vec<(String, Value)> = match context.and_then(|c| c.get("toolCalls")) {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|c| {
                Some((
                    c.get("name")?.as_str()?.to_owned(),
                    c.get("arguments").cloned().unwrap_or(json!({})),
                ))
            })
            .collect(),
        _ => tools
            .iter()
            .map(|t| (t.name.clone(), arguments_for(t)))
            .collect(),
    };
    // SEP-1613: hand the focal tool's schema back exactly as we parsed it.
    let calls = if scenario == "json-schema-2020-12-preservation" {
        let focal = tools
            .iter()
            .find(|t| t.name == "json_schema_2020_12_tool")
            .map(|t| Value::Object(t.input_schema.clone()));
        calls
            .into_iter()
            .map(|(name, args)| match (&*name, &focal) {
                ("json_schema_echo", Some(schema)) => (name, json!({ "schema": schema })),
                _ => (name, args),
            })
            .collect()
    } else {
        calls
    };
    let results = futures_util::future::join_all(calls.iter().map(|(name, args)| {
        let client = client.clone();
        let (name, args) = (name.clone(), args.clone());
        async move { (name.clone(), client.call_tool(&name, args).await) }
    }))
    .await;
    for (name, r) in results {
        match r {
            Ok(result) => eprintln!("tools/call {name}: isError={}", result.failed()),
            // A scenario server without the method is the server's business, not ours.
            Err(e @ ClientError::MethodNotFound(_)) => eprintln!("tools/call {name}: {e}"),
            Err(e) => failures.push(format!("tools/call {name}: {e}")),
        }
    }
    if caps.resources.is_some() {
        match client.list_all_resources().await {
            Ok(resources) => {
                for r in resources {
                    if let Err(e) = client.read_resource(&r.uri).await {
                        failures.push(format!("resources/read {}: {e}", r.uri));
                    }
                }
            }
            Err(ClientError::MethodNotFound(_)) => {}
            Err(e) => failures.push(format!("resources/list: {e}")),
        }
    }
    if caps.prompts.is_some() {
        match client.list_all_prompts().await {
            Ok(prompts) => {
                for p in prompts {
                    let mut args = Map::new();
                    for a in p.arguments.iter().flatten() {
                        args.insert(a.name.clone(), json!("test"));
                    }
                    if let Err(e) = client.get_prompt(&p.name, Value::Object(args)).await {
                        failures.push(format!("prompts/get {}: {e}", p.name));
                    }
                }
            }
            Err(ClientError::MethodNotFound(_)) => {}
            Err(e) => failures.push(format!("prompts/list: {e}")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("{}", failures.join("\n"))
    }
}
