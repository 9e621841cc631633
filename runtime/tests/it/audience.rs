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

fn refused(r: Result<Value, RawClientError>) -> (i64, String) {
    match r {
        Err(RawClientError::Rpc(e)) => (e.code.into(), e.message.into_owned()),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// One connection as one principal, asking in one generation: legacy (an initialized
/// session) or modern (`_meta` on every request).
struct Asker {
    client: RawClient,
    meta: Option<Value>,
}

impl Asker {
    /// Both generations' askers as `principal`.
    async fn both(server: &Server, principal: Option<&str>) -> [Asker; 2] {
        let legacy = RawClient::connect_as(server, principal).await.unwrap();
        legacy.initialize(json!({})).await.unwrap();
        let current = RawClient::connect_as(server, principal).await.unwrap();
        [
            Asker {
                client: legacy,
                meta: None,
            },
            Asker {
                client: current,
                meta: Some(modern()),
            },
        ]
    }

    async fn ask(&self, method: &str, mut params: Value) -> Result<Value, RawClientError> {
        if let Some(meta) = &self.meta {
            params["_meta"] = meta.clone();
        }
        self.client.request(method, params).await
    }

    /// The first text of what `method` answers with `params` (a call's, a prompt's, a read's).
    async fn text(&self, method: &str, params: Value) -> Value {
        let answer = self.ask(method, params).await.unwrap();
        let text = match method {
            "tools/call" => &answer["content"][0]["text"],
            "prompts/get" => &answer["messages"][0]["content"]["text"],
            _ => &answer["contents"][0]["text"],
        };
        text.clone()
    }

    /// The tools, prompts, resources and templates listed, by name or URI.
    async fn listings(&self) -> [Vec<String>; 4] {
        let mut listed = Vec::new();
        for (method, key, field) in [
            ("tools/list", "tools", "name"),
            ("prompts/list", "prompts", "name"),
            ("resources/list", "resources", "uri"),
            (
                "resources/templates/list",
                "resourceTemplates",
                "uriTemplate",
            ),
        ] {
            let answer = self.ask(method, json!({})).await.unwrap();
            let items = answer[key].as_array().unwrap().iter();
            listed.push(
                items
                    .map(|i| i[field].as_str().unwrap().to_owned())
                    .collect(),
            );
        }
        listed.try_into().unwrap()
    }

    /// What completing the briefing prompt's `topic` and the vault template's `id` suggests.
    async fn completions(&self) -> [Value; 2] {
        let mut found = Vec::new();
        for (reference, argument) in [
            (json!({"type": "ref/prompt", "name": "briefing"}), "topic"),
            (json!({"type": "ref/resource", "uri": "vault://{id}"}), "id"),
        ] {
            let params = json!({"ref": reference, "argument": {"name": argument, "value": "x"}});
            let answer = self.ask("completion/complete", params).await.unwrap();
            found.push(answer["completion"]["values"].clone());
        }
        found.try_into().unwrap()
    }
}

/// Both generations: alice sees and uses all of it; bob and an anonymous caller see only
/// what is for everyone, and what is alice's answers them exactly as an unknown name or URI.
#[tokio::test]
async fn what_is_for_an_audience_is_listed_and_served_to_it_alone_and_unknown_to_everyone_else() {
    let server = server().await;
    for alice in Asker::both(&server, Some("alice")).await {
        let listed = alice.listings().await;
        assert_eq!(listed[0], ["open", "secret"]);
        assert_eq!(listed[1], ["greeting", "briefing"]);
        assert_eq!(listed[2], ["res://public", "res://secret"]);
        assert_eq!(listed[3], ["catalog://{id}", "vault://{id}"]);
        let text = alice.text("tools/call", json!({"name": "secret"})).await;
        assert_eq!(text, "secret for alice");
        let text = alice.text("prompts/get", json!({"name": "briefing"})).await;
        assert_eq!(text, "the briefing prompt");
        let text = alice
            .text("resources/read", json!({"uri": "res://secret"}))
            .await;
        assert_eq!(text, "read by alice");
        let text = alice
            .text("resources/read", json!({"uri": "vault://7"}))
            .await;
        assert_eq!(text, "entry 7");
        let suggested = json!(["x-suggested"]);
        assert_eq!(alice.completions().await, [suggested.clone(), suggested]);
        // A listing that hides something from someone is no listing to share.
        if alice.meta.is_some() {
            let tools = alice.ask("tools/list", json!({})).await.unwrap();
            assert_eq!(tools["cacheScope"], "private");
        }
    }

    for principal in [Some("bob"), Some("Alice"), None] {
        for other in Asker::both(&server, principal).await {
            let listed = other.listings().await;
            assert_eq!(listed[0], ["open"], "{principal:?}");
            assert_eq!(listed[1], ["greeting"]);
            assert_eq!(listed[2], ["res://public"]);
            assert_eq!(listed[3], ["catalog://{id}"]);
            // Each answer is the one a name or URI that does not exist gets.
            let hidden = refused(other.ask("tools/call", json!({"name": "secret"})).await);
            assert_eq!(hidden, (-32602, "Unknown tool: secret".to_owned()));
            let hidden = refused(other.ask("prompts/get", json!({"name": "briefing"})).await);
            assert_eq!(hidden, (-32602, "Unknown prompt: briefing".to_owned()));
            let not_found = if other.meta.is_none() { -32002 } else { -32602 };
            for uri in ["res://secret", "vault://7"] {
                let hidden = refused(other.ask("resources/read", json!({"uri": uri})).await);
                assert_eq!(hidden, (not_found, format!("Resource not found: {uri}")));
            }
            // Completing an argument of what it may not see suggests nothing, as for a
            // prompt or template the server does not have.
            assert_eq!(other.completions().await, [json!([]), json!([])]);
            // What is for everyone still answers.
            let text = other
                .text("resources/read", json!({"uri": "catalog://3"}))
                .await;
            assert_eq!(text, "entry 3");
            let text = other.text("tools/call", json!({"name": "open"})).await;
            assert_eq!(text, "open");
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
    let [bob, _] = Asker::both(&server, Some("bob")).await;
    let bob = bob.client;
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
    let [alice, _] = Asker::both(&server, Some("alice")).await;
    let alice = alice.client;
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
            let tools = page["tools"].as_array().unwrap();
            assert!(tools.len() <= 2);
            listed.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
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

/// A list change reaches only the listeners who may see what changed (as it was or as it is
/// now), in both generations: alice hears of her own items, bob and an anonymous caller
/// only of changes to what is for everyone, including an item for everyone made alice's.
#[tokio::test]
async fn a_list_change_reaches_only_the_listeners_who_may_see_what_changed() {
    let server = server().await;
    let mut heard = Vec::new();
    for principal in [Some("alice"), Some("bob"), None] {
        let legacy = Arc::new(RawClient::connect_as(&server, principal).await.unwrap());
        legacy.initialize(json!({})).await.unwrap();
        let current = Arc::new(RawClient::connect_as(&server, principal).await.unwrap());
        let listening = current.clone();
        tokio::spawn(async move {
            listening
                .request_with_id(
                    "listen".into(),
                    "subscriptions/listen",
                    json!({"_meta": modern(), "notifications": {
                        "toolsListChanged": true,
                        "promptsListChanged": true,
                        "resourcesListChanged": true,
                    }}),
                )
                .await
        });
        let ack = current.next_notification().await.unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        heard.push((principal, "legacy", legacy));
        heard.push((principal, "modern", current));
    }
    let for_alice = |name: &str| {
        tool_fn(name, "for alice", |_c, _a: NoArgs| async { Ok("mine") })
            .unwrap()
            .for_audience(alice())
    };
    server.add_tools(vec![for_alice("diary")]);
    server.remove_prompts(vec!["briefing".into()]);
    server.add_resources(vec![ResourceDef::new(
        serde_json::from_value::<Resource>(json!({"uri": "res://new", "name": "new"})).unwrap(),
        Arc::new(|_ctx, req: toolyard::ResourceRequest| {
            Box::pin(async move { Ok(text(&req.uri, "new")) })
        }),
    )]);
    // What was for everyone is alice's now: bob no longer sees it, so he is told.
    server.add_tools(vec![for_alice("open")]);
    server.remove_tools(vec!["diary".into()]);
    server.publish(toolyard::Event::PromptsChanged);

    for (principal, generation, client) in heard {
        let expected: &[&str] = if principal == Some("alice") {
            &["tools", "prompts", "resources", "tools", "tools", "prompts"]
        } else {
            &["resources", "tools", "prompts"]
        };
        let mut got = Vec::new();
        for _ in expected {
            let n = client.next_notification().await.unwrap_or_default();
            let kind = n["method"]
                .as_str()
                .and_then(|m| m.strip_prefix("notifications/"))
                .and_then(|m| m.strip_suffix("/list_changed"))
                .unwrap_or("none");
            got.push(kind.to_owned());
        }
        assert_eq!(got, expected, "{principal:?} ({generation})");
        let more = tokio::time::timeout(Duration::from_millis(200), client.next_notification());
        assert!(
            more.await.ok().flatten().is_none(),
            "{principal:?} ({generation}) heard more"
        );
    }
}

/// A name given twice, each time for an audience, is each audience's own: alice and bob are
/// each listed and call their own definition of `desk` (its description, its handler), in
/// both generations; carol, whom neither admits, finds no such tool.
#[tokio::test]
async fn a_name_with_a_definition_for_each_audience_is_each_callers_own() {
    let desk = |owner: &'static str| {
        tool_fn(
            "desk",
            &format!("{owner}'s desk"),
            move |_ctx, _a: NoArgs| async move { Ok(format!("answered by {owner}'s")) },
        )
        .unwrap()
        .for_audience(Audience::principals([owner]))
    };
    let server = ServerBuilder::new("alternatives", "1.0")
        .tool(desk("alice"))
        .tool(desk("bob"))
        .start()
        .await
        .unwrap();
    for owner in ["alice", "bob"] {
        for asker in Asker::both(&server, Some(owner)).await {
            let tools = asker.ask("tools/list", json!({})).await.unwrap();
            assert_eq!(tools["tools"].as_array().unwrap().len(), 1, "{tools}");
            assert_eq!(tools["tools"][0]["description"], format!("{owner}'s desk"));
            let text = asker.text("tools/call", json!({"name": "desk"})).await;
            assert_eq!(text, format!("answered by {owner}'s"));
        }
        let def = server.tool_for("desk", Some(owner)).unwrap();
        assert_eq!(
            def.tool().description.as_deref(),
            Some(&*format!("{owner}'s desk"))
        );
    }
    for carol in Asker::both(&server, Some("carol")).await {
        let tools = carol.ask("tools/list", json!({})).await.unwrap();
        assert_eq!(tools["tools"], json!([]));
        let hidden = refused(carol.ask("tools/call", json!({"name": "desk"})).await);
        assert_eq!(hidden, (-32602, "Unknown tool: desk".to_owned()));
    }
    assert!(server.tool_for("desk", None).is_none());
    // A name given twice with one definition for everyone is a mistake, as ever.
    let plain = || {
        tool_fn(
            "desk",
            "anyone's",
            |_ctx, _a: NoArgs| async move { Ok("x") },
        )
        .unwrap()
    };
    for second in [plain(), desk("bob")] {
        let built = ServerBuilder::new("twice", "1.0")
            .tool(plain())
            .tool(second)
            .start()
            .await;
        assert!(
            matches!(
                built,
                Err(toolyard::BuildError::Duplicate { kind: "tool", .. })
            ),
            "{built:?}"
        );
    }
}
