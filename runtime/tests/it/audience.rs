//! Definitions for an audience (`toolyard::Audience`): seen and used only by the principals
//! it admits, and to everyone else answered as names and URIs the server does not know.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use toolyard::proto::{GetPromptResult, Prompt, Resource, ResourceTemplate};
use toolyard::{tool_fn, Audience, PromptDef, ResourceDef, Server, ServerBuilder, TemplateDef};
use toolyard_testkit::{RawClient, RawClientError};

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

fn modern() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}})
}

fn alice() -> Audience {
    Audience::principals(["alice"])
}

fn text(uri: &str, says: &str) -> toolyard::proto::ReadResourceResult {
    serde_json::from_value(json!({"contents":[{"uri":uri,"text":says}]})).unwrap()
}

/// A server with one tool, prompt, resource and template for everyone and one of each for
/// alice only.
async fn server() -> Server {
    let prompt = |name: &str| {
        let name = name.to_owned();
        PromptDef::new(
            serde_json::from_value::<Prompt>(json!({"name": name})).unwrap(),
            Arc::new(move |_ctx, _args| {
                let said = format!("the {name} prompt");
                Box::pin(async move {
                    Ok(serde_json::from_value::<GetPromptResult>(json!({
                        "messages":[{"role":"user","content":{"type":"text","text":said}}]
                    }))
                    .unwrap())
                })
            }),
        )
    };
    let resource = |uri: &str| {
        ResourceDef::new(
            serde_json::from_value::<Resource>(json!({"uri": uri, "name": uri})).unwrap(),
            Arc::new(
                |ctx: toolyard::RequestContext, req: toolyard::ResourceRequest| {
                    let says = format!("read by {}", ctx.principal().unwrap_or("anyone"));
                    Box::pin(async move { Ok(text(&req.uri, &says)) })
                },
            ),
        )
    };
    let template = |uri: &str| {
        TemplateDef::new(
            serde_json::from_value::<ResourceTemplate>(json!({"uriTemplate": uri, "name": uri}))
                .unwrap(),
            Arc::new(|_ctx, req: toolyard::ResourceRequest| {
                let says = format!("entry {}", req.vars["id"]);
                Box::pin(async move { Ok(text(&req.uri, &says)) })
            }),
        )
        .unwrap()
    };
    ServerBuilder::new("t", "0")
        .try_tool(tool_fn("open", "for everyone", |_c, _a: NoArgs| async {
            Ok("open")
        }))
        .tool(
            tool_fn(
                "secret",
                "for alice",
                |c: toolyard::RequestContext, _a: NoArgs| async move {
                    Ok(format!("secret for {}", c.principal().unwrap_or("?")))
                },
            )
            .unwrap()
            .for_audience(alice()),
        )
        .prompt(prompt("greeting"))
        .prompt(prompt("briefing").for_audience(alice()))
        .resource(resource("res://public"))
        .resource(resource("res://secret").for_audience(alice()))
        .template(template("catalog://{id}"))
        .template(template("vault://{id}").for_audience(alice()))
        .completer(
            toolyard::CompletionTarget::Prompt("briefing".into(), "topic".into()),
            suggest(),
        )
        .completer(
            toolyard::CompletionTarget::Resource("vault://{id}".into(), "id".into()),
            suggest(),
        )
        .start()
        .await
        .unwrap()
}

/// A completer suggesting one value.
fn suggest() -> toolyard::CompleteFn {
    Arc::new(|_ctx, typed: String, _| {
        Box::pin(async move { toolyard::Completions::from(vec![format!("{typed}-suggested")]) })
    })
}

/// The values `completion/complete` of `reference`'s `argument` suggests to `client`.
async fn completed(client: &RawClient, m: &Value, reference: Value, argument: &str) -> Value {
    let mut params = json!({"ref": reference, "argument": {"name": argument, "value": "x"}});
    if !m.is_null() {
        params["_meta"] = m.clone();
    }
    let answer = client.request("completion/complete", params).await.unwrap();
    answer["completion"]["values"].clone()
}

fn names(listed: &Value, key: &str, field: &str) -> Vec<String> {
    listed[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[field].as_str().unwrap().to_owned())
        .collect()
}

fn refused(r: Result<Value, RawClientError>) -> (i64, String) {
    match r {
        Err(RawClientError::Rpc(e)) => (e.code.into(), e.message.into_owned()),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// A legacy session as `principal` (initialized) and a connection for modern requests.
async fn clients(server: &Server, principal: Option<&str>) -> (RawClient, RawClient) {
    let legacy = RawClient::connect_as(server, principal).await.unwrap();
    legacy.initialize(json!({})).await.unwrap();
    let modern = RawClient::connect_as(server, principal).await.unwrap();
    (legacy, modern)
}

/// Both generations: alice sees and uses all of it; bob and an anonymous caller see only
/// what is for everyone, and what is alice's answers them exactly as an unknown name or URI.
#[tokio::test]
async fn what_is_for_an_audience_is_listed_and_served_to_it_alone_and_unknown_to_everyone_else() {
    let server = server().await;
    let (legacy, current) = clients(&server, Some("alice")).await;
    for (client, m) in [(&legacy, Value::Null), (&current, modern())] {
        let with = |mut p: Value| {
            if !m.is_null() {
                p["_meta"] = m.clone();
            }
            p
        };
        let tools = client.request("tools/list", with(json!({}))).await.unwrap();
        assert_eq!(names(&tools, "tools", "name"), ["open", "secret"]);
        let prompts = client
            .request("prompts/list", with(json!({})))
            .await
            .unwrap();
        assert_eq!(names(&prompts, "prompts", "name"), ["greeting", "briefing"]);
        let resources = client
            .request("resources/list", with(json!({})))
            .await
            .unwrap();
        assert_eq!(
            names(&resources, "resources", "uri"),
            ["res://public", "res://secret"]
        );
        let templates = client
            .request("resources/templates/list", with(json!({})))
            .await
            .unwrap();
        assert_eq!(
            names(&templates, "resourceTemplates", "uriTemplate"),
            ["catalog://{id}", "vault://{id}"]
        );
        let called = client
            .request("tools/call", with(json!({"name":"secret"})))
            .await
            .unwrap();
        assert_eq!(called["content"][0]["text"], "secret for alice");
        let got = client
            .request("prompts/get", with(json!({"name":"briefing"})))
            .await
            .unwrap();
        assert_eq!(got["messages"][0]["content"]["text"], "the briefing prompt");
        let read = client
            .request("resources/read", with(json!({"uri":"res://secret"})))
            .await
            .unwrap();
        assert_eq!(read["contents"][0]["text"], "read by alice");
        let read = client
            .request("resources/read", with(json!({"uri":"vault://7"})))
            .await
            .unwrap();
        assert_eq!(read["contents"][0]["text"], "entry 7");
        let prompt = json!({"type": "ref/prompt", "name": "briefing"});
        let vault = json!({"type": "ref/resource", "uri": "vault://{id}"});
        assert_eq!(
            completed(client, &m, prompt, "topic").await,
            json!(["x-suggested"])
        );
        assert_eq!(
            completed(client, &m, vault, "id").await,
            json!(["x-suggested"])
        );
    }
    // A listing that hides something from someone is no listing to share between callers.
    let tools = current
        .request("tools/list", json!({"_meta": modern()}))
        .await
        .unwrap();
    assert_eq!(tools["cacheScope"], "private");

    for principal in [Some("bob"), Some("Alice"), None] {
        let (legacy, current) = clients(&server, principal).await;
        for (client, m) in [(&legacy, Value::Null), (&current, modern())] {
            let with = |mut p: Value| {
                if !m.is_null() {
                    p["_meta"] = m.clone();
                }
                p
            };
            let tools = client.request("tools/list", with(json!({}))).await.unwrap();
            assert_eq!(names(&tools, "tools", "name"), ["open"], "{principal:?}");
            let prompts = client
                .request("prompts/list", with(json!({})))
                .await
                .unwrap();
            assert_eq!(names(&prompts, "prompts", "name"), ["greeting"]);
            let resources = client
                .request("resources/list", with(json!({})))
                .await
                .unwrap();
            assert_eq!(names(&resources, "resources", "uri"), ["res://public"]);
            let templates = client
                .request("resources/templates/list", with(json!({})))
                .await
                .unwrap();
            assert_eq!(
                names(&templates, "resourceTemplates", "uriTemplate"),
                ["catalog://{id}"]
            );
            // Each answer is the one a name or URI that does not exist gets.
            let hidden = refused(
                client
                    .request("tools/call", with(json!({"name":"secret"})))
                    .await,
            );
            assert_eq!(hidden, (-32602, "Unknown tool: secret".to_owned()));
            let hidden = refused(
                client
                    .request("prompts/get", with(json!({"name":"briefing"})))
                    .await,
            );
            assert_eq!(hidden, (-32602, "Unknown prompt: briefing".to_owned()));
            let not_found = if m.is_null() { -32002 } else { -32602 };
            for uri in ["res://secret", "vault://7"] {
                let hidden = refused(
                    client
                        .request("resources/read", with(json!({"uri": uri})))
                        .await,
                );
                assert_eq!(hidden, (not_found, format!("Resource not found: {uri}")));
            }
            // Completing an argument of what it may not see suggests nothing, as for a
            // prompt or template the server does not have.
            let prompt = json!({"type": "ref/prompt", "name": "briefing"});
            let vault = json!({"type": "ref/resource", "uri": "vault://{id}"});
            assert_eq!(completed(client, &m, prompt, "topic").await, json!([]));
            assert_eq!(completed(client, &m, vault, "id").await, json!([]));
            // What is for everyone still answers.
            let read = client
                .request("resources/read", with(json!({"uri":"catalog://3"})))
                .await
                .unwrap();
            assert_eq!(read["contents"][0]["text"], "entry 3");
            let called = client
                .request("tools/call", with(json!({"name":"open"})))
                .await
                .unwrap();
            assert_eq!(called["content"][0]["text"], "open");
        }
    }

    // Without any audience a listing stays shareable.
    let plain = ServerBuilder::new("t", "0")
        .try_tool(tool_fn("open", "for everyone", |_c, _a: NoArgs| async {
            Ok("open")
        }))
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&plain).await.unwrap();
    let tools = client
        .request("tools/list", json!({"_meta": modern()}))
        .await
        .unwrap();
    assert_eq!(tools["cacheScope"], "public");
}

/// A subscription to a resource (or a template's URI) the caller may not see is refused as
/// a read of it would be, so no update tells it the resource exists; alice's counts and
/// hears the update.
#[tokio::test]
async fn subscribing_to_what_one_may_not_see_is_refused_as_an_unknown_uri() {
    let server = server().await;
    let (bob, _) = clients(&server, Some("bob")).await;
    for uri in ["res://secret", "vault://7"] {
        let hidden = refused(
            bob.request("resources/subscribe", json!({"uri": uri}))
                .await,
        );
        assert_eq!(hidden, (-32002, format!("Resource not found: {uri}")));
    }
    bob.request("resources/subscribe", json!({"uri":"res://public"}))
        .await
        .unwrap();
    let (alice, _) = clients(&server, Some("alice")).await;
    alice
        .request("resources/subscribe", json!({"uri":"res://secret"}))
        .await
        .unwrap();
    server.notify_resource_updated("res://secret");
    server.notify_resource_updated("res://public");
    let heard = alice.next_notification().await.unwrap();
    assert_eq!(heard["params"]["uri"], "res://secret");
    let heard = bob.next_notification().await.unwrap();
    assert_eq!(heard["params"]["uri"], "res://public");
    let more = tokio::time::timeout(Duration::from_millis(200), bob.next_notification()).await;
    assert!(more.is_err(), "bob heard more: {more:?}");
}

/// Pages are pages of what the caller may see: each caller's pages together are its whole
/// listing, in registration order, whatever the others may see.
#[tokio::test]
async fn pages_hold_only_what_the_caller_may_see_and_together_all_of_it() {
    let mut b = ServerBuilder::new("t", "0").list_settings(toolyard::ListSettings {
        page_size: 2,
        ..Default::default()
    });
    for i in 0..7 {
        let def = tool_fn(&format!("t{i}"), "numbered", |_c, _a: NoArgs| async {
            Ok("x")
        })
        .unwrap();
        b = b.tool(if i % 2 == 1 {
            def.for_audience(Audience::when(|p| p.ends_with("@example.com")))
        } else {
            def
        });
    }
    let server = b.start().await.unwrap();
    for (principal, expected) in [
        (
            Some("carol@example.com"),
            vec!["t0", "t1", "t2", "t3", "t4", "t5", "t6"],
        ),
        (Some("carol@example.org"), vec!["t0", "t2", "t4", "t6"]),
        (None, vec!["t0", "t2", "t4", "t6"]),
    ] {
        let client = RawClient::connect_as(&server, principal).await.unwrap();
        client.initialize(json!({})).await.unwrap();
        let (mut listed, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
        loop {
            let page = client
                .request("tools/list", json!({"cursor": cursor}))
                .await
                .unwrap();
            let names = names(&page, "tools", "name");
            assert!(names.len() <= 2);
            listed.extend(names);
            pages += 1;
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(listed, expected, "{principal:?}");
        assert_eq!(pages, expected.len().div_ceil(2));
    }
}
