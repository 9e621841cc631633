//! The same session against `@modelcontextprotocol/server-everything` directly and through
//! the gateway (`toolyard serve --stdio --no-demo --config <file>` with server-everything as
//! its one source), compared answer by answer: what a source offers must work through the
//! gateway as it does directly, with only its names namespaced (`everything__<name>`,
//! `everything+<uri>`).
//!
//! The session: list tools, prompts, resources and templates; complete every prompt argument
//! and every template variable (regression: through the gateway completion answered nothing);
//! get every prompt with completed arguments; read the first resources; call the
//! deterministic tools. What the gateway does not relay is listed in the README ("Through
//! the gateway") and is not part of this session.

use crate::client_interop::installed;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use toolyard::client::{
    elicit_handler, fixed_roots, sample_handler, Client, ClientBuilder, ProtocolChoice,
    StdioTransport,
};
use toolyard::proto::{
    CompleteArgument, CompleteContext, CompleteReference, CompleteRequestParams,
    CreateMessageResult, ElicitAction, ElicitResult, Implementation, PromptReference,
    ResourceTemplateReference, Role, Root, SamplingMessageContent, SamplingMessageContentBlock,
    TextContent,
};

const PREFIX: &str = "everything__";
const URI_PREFIX: &str = "everything+";
const WAIT: Duration = Duration::from_secs(60);

fn everything_js() -> String {
    installed("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .display()
        .to_string()
}

/// Both clients declare the same capabilities (server-everything offers some tools only to
/// clients that can answer elicitation, sampling or roots, and the gateway relays all three).
fn client() -> ClientBuilder {
    ClientBuilder::new(Implementation::new("toolyard-parity", "1.0"))
        .protocol(ProtocolChoice::Auto)
        .request_timeout(WAIT)
        .handshake_timeout(WAIT)
        .on_elicit(elicit_handler(|_| async {
            Ok(ElicitResult::new(ElicitAction::Decline))
        }))
        .on_sample(sample_handler(|_| async {
            Ok(CreateMessageResult {
                role: Role::Assistant,
                content: SamplingMessageContent::Single(SamplingMessageContentBlock::Text(
                    TextContent::new("sampled"),
                )),
                model: "parity-model".into(),
                stop_reason: Some("endTurn".into()),
                meta: None,
                result_type: None,
            })
        }))
        .on_roots(fixed_roots(vec![Root::new(
            "file:///tmp/toolyard-parity-root",
            "parity root",
        )]))
}

async fn direct() -> Client {
    client()
        .connect(
            StdioTransport::new("node")
                .arg(everything_js())
                .arg("stdio")
                .name("server-everything"),
        )
        .await
        .expect("connect to server-everything")
}

async fn through_gateway(dir: &std::path::Path) -> Client {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nfailure_mode = \"fail\"\n\n[[sources]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{}, \"stdio\"]\nstartup_timeout_ms = 60000\n",
            serde_json::to_string(&everything_js()).unwrap()
        ),
    )
    .unwrap();
    client()
        .connect(
            StdioTransport::new(env!("CARGO_BIN_EXE_toolyard"))
                .arg("serve")
                .arg("--stdio")
                .arg("--no-demo")
                .arg("--config")
                .arg(config.display().to_string())
                .name("gateway"),
        )
        .await
        .expect("connect to the gateway")
}

/// `value` as JSON with the fields the two paths may legitimately differ in removed: the
/// modern generation's cache hints and result type, and `_meta`.
fn comparable(value: impl serde::Serialize) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for key in ["_meta", "resultType", "ttlMs", "cacheScope", "nextCursor"] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            Value::String(text) => *text = without_clock_times(text),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(value).unwrap();
    strip(&mut v);
    v
}

/// `text` with every wall-clock time (`7:30:30`, `19:30:30`) replaced by `<time>`.
///
/// Regression: server-everything's dynamic resources say when they were made ("created at
/// 7:30:30 PM"), so the direct and the gateway's answer differed whenever the second ticked
/// between the two calls.
fn without_clock_times(text: &str) -> String {
    let bytes = text.as_bytes();
    let digits = |at: usize, n: usize| {
        at + n <= bytes.len() && bytes[at..at + n].iter().all(u8::is_ascii_digit)
    };
    let (mut out, mut i) = (String::with_capacity(text.len()), 0);
    while i < bytes.len() {
        let starts_here = i == 0 || !bytes[i - 1].is_ascii_digit();
        let hour = if digits(i, 2) { 2 } else { 1 };
        let clock = starts_here
            && digits(i, hour)
            && bytes.get(i + hour) == Some(&b':')
            && digits(i + hour + 1, 2)
            && bytes.get(i + hour + 3) == Some(&b':')
            && digits(i + hour + 4, 2);
        if clock {
            out.push_str("<time>");
            i += hour + 6;
        } else {
            let ch = text[i..].chars().next().unwrap_or_default();
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    out
}

#[test]
fn clock_times_are_masked_and_other_text_kept() {
    assert_eq!(
        without_clock_times("created at 7:30:30 PM, again 19:05:01; ratio 1:2, é"),
        "created at <time> PM, again <time>; ratio 1:2, é"
    );
}

/// The gateway's answer with its namespacing undone, for comparison with the direct one.
fn un_namespaced(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    if let Value::String(s) = field {
                        if key == "name" {
                            if let Some(rest) = s.strip_prefix(PREFIX) {
                                *s = rest.to_owned();
                            }
                        }
                        if key == "uri" || key == "uriTemplate" {
                            if let Some(rest) = s.strip_prefix(URI_PREFIX) {
                                *s = rest.to_owned();
                            }
                        }
                    } else {
                        walk(field);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

fn by_key(items: Value, key: &str) -> BTreeMap<String, Value> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i[key].as_str().unwrap().to_owned(), i.clone()))
        .collect()
}

async fn complete(
    client: &Client,
    reference: CompleteReference,
    argument: &str,
    value: &str,
    context: &BTreeMap<String, String>,
) -> Vec<String> {
    client
        .complete(CompleteRequestParams {
            meta: None,
            r#ref: reference,
            argument: CompleteArgument {
                name: argument.to_owned(),
                value: value.to_owned(),
            },
            context: (!context.is_empty()).then(|| CompleteContext {
                arguments: Some(context.clone()),
            }),
        })
        .await
        .unwrap_or_else(|e| panic!("completion of {argument}: {e}"))
        .completion
        .values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_through_the_gateway_answers_as_server_everything_does_directly() {
    let dir = crate::client_interop::TempDir::new("parity");
    let (d, g) = (direct().await, through_gateway(dir.path()).await);

    // Listings: the same items, namespaced.
    let tools_d = comparable(d.list_all_tools().await.unwrap());
    let tools_g = un_namespaced(comparable(g.list_all_tools().await.unwrap()));
    let (tools_d, tools_g) = (by_key(tools_d, "name"), by_key(tools_g, "name"));
    assert_eq!(
        tools_d.keys().collect::<Vec<_>>(),
        tools_g.keys().collect::<Vec<_>>()
    );
    for (name, tool) in &tools_d {
        assert_eq!(tool, &tools_g[name], "tool {name}");
    }
    let prompts_d = comparable(d.list_all_prompts().await.unwrap());
    let prompts_g = un_namespaced(comparable(g.list_all_prompts().await.unwrap()));
    assert_eq!(prompts_d, prompts_g, "prompts/list");
    let resources_d = comparable(d.list_all_resources().await.unwrap());
    let resources_g = un_namespaced(comparable(g.list_all_resources().await.unwrap()));
    assert_eq!(resources_d, resources_g, "resources/list");
    let templates_d = comparable(d.list_all_resource_templates().await.unwrap());
    let templates_g = un_namespaced(comparable(g.list_all_resource_templates().await.unwrap()));
    assert_eq!(templates_d, templates_g, "resources/templates/list");

    // Completion of every prompt argument (each filled in turn, so later arguments see the
    // earlier ones in their context), then prompts/get with those values.
    let mut completed_something = false;
    for prompt in prompts_d.as_array().unwrap() {
        let name = prompt["name"].as_str().unwrap();
        let mut filled = BTreeMap::new();
        for arg in prompt["arguments"].as_array().into_iter().flatten() {
            let arg = arg["name"].as_str().unwrap();
            let values_d = complete(
                &d,
                CompleteReference::Prompt(PromptReference {
                    name: name.to_owned(),
                    title: None,
                }),
                arg,
                "",
                &filled,
            )
            .await;
            let values_g = complete(
                &g,
                CompleteReference::Prompt(PromptReference {
                    name: format!("{PREFIX}{name}"),
                    title: None,
                }),
                arg,
                "",
                &filled,
            )
            .await;
            assert_eq!(values_d, values_g, "completion of {name}.{arg}");
            completed_something |= !values_d.is_empty();
            let value = values_d.first().cloned().unwrap_or_else(|| "1".to_owned());
            filled.insert(arg.to_owned(), value);
        }
        let args: Map<String, Value> = filled.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let got_d = comparable(d.get_prompt(name, json!(args)).await.unwrap());
        let got_g = un_namespaced(comparable(
            g.get_prompt(&format!("{PREFIX}{name}"), json!(args))
                .await
                .unwrap(),
        ));
        assert_eq!(got_d, got_g, "prompts/get {name}");
    }
    assert!(
        completed_something,
        "server-everything completes some prompt argument: the session must exercise it"
    );

    // Completion of every template variable.
    for template in templates_d.as_array().unwrap() {
        let uri = template["uriTemplate"].as_str().unwrap();
        let vars = toolyard::UriTemplate::parse(uri).unwrap();
        for var in vars.variables() {
            let values_d = complete(
                &d,
                CompleteReference::ResourceTemplate(ResourceTemplateReference {
                    uri: uri.to_owned(),
                }),
                var,
                "",
                &BTreeMap::new(),
            )
            .await;
            let values_g = complete(
                &g,
                CompleteReference::ResourceTemplate(ResourceTemplateReference {
                    uri: format!("{URI_PREFIX}{uri}"),
                }),
                var,
                "",
                &BTreeMap::new(),
            )
            .await;
            assert_eq!(values_d, values_g, "completion of {uri} {{{var}}}");
        }
    }

    // Reads of the first resources.
    for resource in resources_d.as_array().unwrap().iter().take(5) {
        let uri = resource["uri"].as_str().unwrap();
        let read_d = comparable(d.read_resource(uri).await.unwrap());
        let read_g = un_namespaced(comparable(
            g.read_resource(&format!("{URI_PREFIX}{uri}"))
                .await
                .unwrap(),
        ));
        assert_eq!(read_d, read_g, "resources/read {uri}");
    }

    // The deterministic tools.
    for (tool, args) in [
        ("echo", json!({"message": "parity"})),
        ("get-sum", json!({"a": 2, "b": 3})),
        ("get-tiny-image", json!({})),
        ("get-structured-content", json!({"location": "New York"})),
    ] {
        if !tools_d.contains_key(tool) {
            continue;
        }
        let called_d = comparable(d.call_tool(tool, args.clone()).await.unwrap());
        let called_g = un_namespaced(comparable(
            g.call_tool(&format!("{PREFIX}{tool}"), args).await.unwrap(),
        ));
        assert_eq!(called_d, called_g, "tools/call {tool}");
    }
    d.close().await;
    g.close().await;
}

/// Regression: server-everything sends `notifications/resources/updated` only for URIs its
/// client subscribed to, and the gateway did not subscribe upstream, so a subscriber through
/// the gateway heard nothing. The gateway now subscribes upstream while someone listens; the
/// update reaches the downstream subscriber under the exposed URI.
#[tokio::test]
async fn a_resource_subscription_through_the_gateway_receives_the_sources_updates() {
    let dir = crate::client_interop::TempDir::new("parity-subscribe");
    let gateway = through_gateway(&dir.0).await;
    let uri = format!("{URI_PREFIX}demo://resource/static/document/features.md");
    let mut subscription = gateway
        .subscribe(toolyard::proto::SubscriptionFilter {
            resource_subscriptions: Some(vec![uri.clone()]),
            ..Default::default()
        })
        .await
        .expect("resources/subscribe through the gateway");
    let toggle = format!("{PREFIX}toggle-subscriber-updates");
    let updated = tokio::time::timeout(WAIT, async {
        // The upstream subscribe is made in the background: toggle the source's updates on
        // (they are sent for the URIs its client subscribed to) until one arrives.
        loop {
            let on = gateway
                .call_tool(&toggle, json!({}))
                .await
                .expect("toggle-subscriber-updates");
            assert!(!on.failed(), "{on:?}");
            let heard = tokio::time::timeout(Duration::from_secs(3), async {
                loop {
                    let n = subscription.next().await.expect("the gateway is open");
                    if n.method == "notifications/resources/updated" {
                        return n;
                    }
                }
            })
            .await;
            if let Ok(n) = heard {
                return n;
            }
            // Toggle back off before trying again.
            gateway
                .call_tool(&toggle, json!({}))
                .await
                .expect("toggle off");
        }
    })
    .await
    .expect("an update through the gateway within the wait");
    assert_eq!(updated.params["uri"], uri.as_str());
    drop(subscription);
    gateway.close().await;
}

/// What the gateway does not relay is said in its capability answer too
/// (`capabilities.experimental["io.toolyard/gateway"].notRelayed`), not only in the README.
#[tokio::test]
async fn the_gateways_capabilities_name_what_it_does_not_relay() {
    let dir = crate::client_interop::TempDir::new("parity-caps");
    let gateway = through_gateway(&dir.0).await;
    let session = gateway.session().expect("a session");
    let experimental = session
        .capabilities
        .experimental
        .clone()
        .expect("an experimental capability");
    let not_relayed: Vec<&str> = experimental["io.toolyard/gateway"]["notRelayed"]
        .as_array()
        .expect("a notRelayed list")
        .iter()
        .filter_map(|e| e["what"].as_str())
        .collect();
    assert!(
        not_relayed.contains(&"notifications/message"),
        "{not_relayed:?}"
    );
    assert!(
        not_relayed.contains(&"io.modelcontextprotocol/tasks"),
        "{not_relayed:?}"
    );
    gateway.close().await;
}
