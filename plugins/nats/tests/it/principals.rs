//! The caller's principal across the bus: a worker's tool sees the gateway's caller as
//! `RequestContext::principal`, on every round of its call, and a principal is taken only on
//! the subject of its own user token, so a plain client cannot act as someone else.

use crate::faults::{headers, raw_call, refusal};
use crate::tasks::{
    answer as answer_task, answering_caller, asked, durable_gateway_configured, durable_gateway_of,
    terminal,
};
use crate::*;
use std::collections::BTreeSet;

use async_nats::HeaderMap;
use futures_util::StreamExt;
use serde_json::json;
use toolyard::proto::{ElicitAction, ElicitRequestParams, ElicitResult, ProtocolVersion};
use toolyard_nats::{principal_token, wire, Scope};
use toolyard_testkit::{NatsServer, RawClient};

const ALICE: &str = "alice@example.com";

/// A server whose `whoami` answers its caller's principal ("nobody" without one), and whose
/// `ask_whoami` asks the caller for a name first (an input round) and answers
/// "NAME as PRINCIPAL".
async fn who_server() -> Server {
    let whoami = tool_fn(
        "whoami",
        "Says who called",
        |ctx: toolyard::RequestContext, _a: serde_json::Value| async move {
            Ok::<_, HandlerError>(ctx.principal().unwrap_or("nobody").to_owned())
        },
    )
    .unwrap();
    let ask = tool_fn(
        "ask_whoami",
        "Asks for a name, then says who called",
        |ctx: toolyard::RequestContext, _a: serde_json::Value| async move {
            let answer = ctx.elicit("name", form("Your name?")).await?;
            Ok::<_, HandlerError>(format!(
                "{} as {}",
                answered_name(&answer),
                ctx.principal().unwrap_or("nobody")
            ))
        },
    )
    .unwrap();
    // The same as a task (a durable job), and a tool that asks for a name, starts its task
    // (handed back to the gateway, then a job), asks again (parked in the record, resumed
    // by another job) and says who called.
    let whoami_task = tool_fn(
        "whoami_task",
        "Says who called, as a task",
        |ctx: toolyard::RequestContext, _a: serde_json::Value| async move {
            Ok::<_, HandlerError>(ctx.principal().unwrap_or("nobody").to_owned())
        },
    )
    .unwrap()
    .with_task_support(toolyard::proto::TaskSupport::Required);
    let ask_then_task = tool_fn(
        "ask_then_whoami",
        "Asks for a name, becomes a task, asks again and says who called",
        |ctx: toolyard::RequestContext, _a: serde_json::Value| async move {
            let first = ctx.elicit("name", form("First name?")).await?;
            ctx.start_task().await;
            let second = ctx.elicit("again", form("Last name?")).await?;
            Ok::<_, HandlerError>(format!(
                "{} {} as {}",
                answered_name(&first),
                answered_name(&second),
                ctx.principal().unwrap_or("nobody")
            ))
        },
    )
    .unwrap()
    .with_task_support(toolyard::proto::TaskSupport::Required)
    .with_deferred_task();
    ServerBuilder::new("who", "1.0")
        .tool(whoami)
        .tool(ask)
        .tool(whoami_task)
        .tool(ask_then_task)
        .start()
        .await
        .unwrap()
}

async fn who_worker(url: &str) -> Worker {
    let mut config = WorkerConfig::new("who");
    config.tasks = true;
    config.keepalive = Duration::from_millis(200);
    config.drain_timeout = Duration::from_millis(500);
    Worker::start(who_server().await, connect(url).await, config)
        .await
        .unwrap()
}

/// A client of `server` in `choice`'s generation, connected as `principal`, that answers
/// every elicitation with the name "Ada".
async fn client_as(server: &Server, choice: ProtocolChoice, principal: Option<&str>) -> Client {
    let transport = match principal {
        Some(p) => MemoryTransport::new(server).as_principal(p),
        None => MemoryTransport::new(server),
    };
    ClientBuilder::new(Implementation::new("who-test", "1.0"))
        .protocol(choice)
        .request_timeout(WAIT)
        .on_elicit(Arc::new(|_params: ElicitRequestParams| {
            Box::pin(async move {
                let mut content = toolyard::proto::JsonObject::new();
                content.insert("name".into(), json!("Ada"));
                Ok(ElicitResult {
                    action: ElicitAction::Accept,
                    content: Some(content),
                    meta: None,
                    result_type: None,
                })
            })
        }))
        .connect(transport)
        .await
        .unwrap()
}

async fn answer(client: &Client, tool: &str) -> String {
    let r = client.call_tool(tool, json!({})).await.unwrap();
    assert_eq!(r.is_error, None, "{r:?}");
    text(&r)
}

/// The user token and `Mcp-Principal` of each tool call seen on `seen` so far (until it has
/// been quiet for a moment).
async fn calls_seen(seen: &mut async_nats::Subscriber) -> Vec<(String, Option<String>)> {
    let mut calls = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), seen.next()).await {
        if !m.subject.contains(".tools.call.") {
            continue;
        }
        let user = m.subject.split('.').nth(4).unwrap_or_default().to_owned();
        let principal = m
            .headers
            .as_ref()
            .and_then(|h| h.get(wire::PRINCIPAL))
            .map(|v| v.as_str().to_owned());
        calls.push((user, principal));
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_tool_sees_the_gateways_caller_as_its_principal_on_every_round() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = who_worker(&url).await;
    let gw = gateway(&url, RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "who__ask_whoami")).await;
    let raw = connect(&url).await;
    let mut seen = raw.subscribe("mcp.v1.req.>").await.unwrap();
    raw.flush().await.unwrap();

    for choice in [
        ProtocolChoice::Modern,
        ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25),
    ] {
        let alice = client_as(&gw.server, choice, Some(ALICE)).await;
        let as_alice = (principal_token(ALICE), Some(ALICE.to_owned()));
        assert_eq!(answer(&alice, "who__whoami").await, ALICE, "{choice:?}");
        assert_eq!(
            calls_seen(&mut seen).await,
            vec![as_alice.clone()],
            "the subject's user token is made from the principal the header carries"
        );
        // Rounds on the bus (the question, then the retry with its answer), each carrying
        // the principal: the worker's sealed `requestState` is bound to it, and would not
        // open on a round without it.
        assert_eq!(
            answer(&alice, "who__ask_whoami").await,
            format!("Ada as {ALICE}"),
            "{choice:?}"
        );
        let rounds = calls_seen(&mut seen).await;
        assert!(
            rounds.len() >= 2 && rounds.iter().all(|r| *r == as_alice),
            "{choice:?}: {rounds:?}"
        );

        let anonymous = client_as(&gw.server, choice, None).await;
        assert_eq!(answer(&anonymous, "who__whoami").await, "nobody");
        assert_eq!(calls_seen(&mut seen).await, vec![("_".to_owned(), None)]);
    }

    // A principal a header would not carry as it is (its reader trims it) is not sent
    // changed: the call fails saying why, and nothing reaches the bus.
    let padded = client_as(&gw.server, ProtocolChoice::Modern, Some(" alice ")).await;
    let failed = padded.call_tool("who__whoami", json!({})).await;
    let why = match failed {
        Ok(r) => text(&r),
        Err(e) => e.to_string(),
    };
    assert!(why.contains("cannot be sent"), "{why}");
    assert_eq!(calls_seen(&mut seen).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_told_not_to_or_calling_as_one_user_sends_no_principal() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = who_worker(&url).await;
    let raw = connect(&url).await;
    let mut seen = raw.subscribe("mcp.v1.req.>").await.unwrap();
    raw.flush().await.unwrap();
    for (config, user) in [
        (
            RemoteConfig {
                forward_principal: false,
                ..RemoteConfig::default()
            },
            "_",
        ),
        (
            RemoteConfig {
                caller: Scope::of(Some("acme"), Some("bob")).unwrap(),
                ..RemoteConfig::default()
            },
            "bob",
        ),
    ] {
        let gw = gateway(&url, config).await;
        listed(&gw.client, |n| n.iter().any(|t| t == "who__whoami")).await;
        let alice = client_as(&gw.server, ProtocolChoice::Modern, Some(ALICE)).await;
        assert_eq!(answer(&alice, "who__whoami").await, "nobody");
        assert_eq!(calls_seen(&mut seen).await, vec![(user.to_owned(), None)]);
    }
}

/// `Mcp-Principal` on a subject whose user token is not made from it is a header mismatch;
/// on its own user's subject the tool sees it (NATS permissions on that subject decide who
/// may send it); the worker serves on either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_on_another_users_subject_is_refused_and_the_worker_serves_on() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = who_worker(&url).await;
    let raw = connect(&url).await;
    let body = whoami_body();
    let subject = |user: &str| format!("mcp.v1.req.acme.{user}.who.tools.call.whoami");
    let mallory = principal_token("mallory");
    for user in ["_", "bob", mallory.as_str()] {
        let frames = raw_call(&raw, &subject(user), claiming(ALICE), &body).await;
        let error = refusal(&frames);
        assert_eq!(error["code"], wire::HEADER_MISMATCH, "{error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("Mcp-Principal"), "{message}");
    }
    // Any principal a header carries as it is, a name beyond ASCII too.
    for principal in [ALICE, "Zoë Ångström|auth0"] {
        let frames = raw_call(
            &raw,
            &subject(&principal_token(principal)),
            claiming(principal),
            &body,
        )
        .await;
        let (frame, answer) = frames.last().unwrap();
        assert_eq!(frame, "end", "{frames:?}");
        assert_eq!(
            answer["result"]["content"][0]["text"], principal,
            "{answer}"
        );
    }
    let frames = raw_call(
        &raw,
        &subject("_"),
        headers("tools/call", Some("whoami")),
        &body,
    )
    .await;
    let (frame, answer) = frames.last().unwrap();
    assert_eq!(frame, "end", "{frames:?}");
    assert_eq!(answer["result"]["content"][0]["text"], "nobody");
}

/// A task's tool runs as a durable job on a worker, maybe in several jobs (handed back after
/// its first round, parked while it waits for an answer, resumed by another job): each job
/// carries its caller's principal, and the tool sees it to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_tasks_tool_sees_its_callers_principal_in_every_job() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _worker = who_worker(&url).await;
    let (server, _remote, anonymous, _following) = durable_gateway_of(&url, Scope::every()).await;
    let alice = RawClient::connect_as(&server, Some(ALICE)).await.unwrap();
    let caller = answering_caller();
    listed_to(&alice, "who__ask_then_whoami").await;

    for (client, who) in [(&alice, ALICE), (&anonymous, "nobody")] {
        let created = client
            .request(
                "tools/call",
                json!({"name": "who__whoami_task", "arguments": {}, "_meta": caller}),
            )
            .await
            .unwrap();
        assert_eq!(created["resultType"], "task", "{created}");
        let done = terminal(client, created["taskId"].as_str().unwrap()).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], who, "{done}");
    }

    let call = |params: serde_json::Value| alice.request("tools/call", params);
    let first = call(json!({"name": "who__ask_then_whoami", "arguments": {}, "_meta": caller}))
        .await
        .unwrap();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let created = call(json!({
        "name": "who__ask_then_whoami",
        "arguments": {},
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": first["requestState"],
        "_meta": caller,
    }))
    .await
    .unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    asked(&alice, &id, "again").await;
    answer_task(&alice, &id, "again", "Lovelace").await;
    let done = terminal(&alice, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        format!("Ada Lovelace as {ALICE}"),
        "{done}"
    );
}

/// The permissions that make the principal check an authorization: a backend whose NATS
/// user may publish only its own user's token (and unattributed requests) calls as that user
/// and no one else. Its publish on another principal's token is refused by the broker (the
/// worker never sees it), and that principal's header on a subject it may use is refused by
/// the worker (-32020); the gateway's user, which may publish for every user, calls for
/// anyone its own transport authenticated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_the_broker_keeps_to_its_own_users_token_cannot_act_as_another() {
    let bob = principal_token("bob");
    let nats = NatsServer::start_with_config(&format!(
        r#"accounts {{
  APP: {{
    jetstream: enabled
    users: [
      {{ user: "worker", password: "w" }}
      {{ user: "gateway", password: "g" }}
      {{ user: "backend", password: "b", permissions: {{
          publish: {{ allow: ["mcp.v1.req.*.{bob}.>", "mcp.v1.req.*._.>"] }}
          subscribe: {{ allow: ["_INBOX.>"] }} }} }}
    ]
  }}
}}"#
    ));
    let as_user = |user: &str, password: &str| {
        nats.url()
            .replace("nats://", &format!("nats://{user}:{password}@"))
    };
    let _worker = who_worker(&as_user("worker", "w")).await;
    let gw = gateway(&as_user("gateway", "g"), RemoteConfig::default()).await;
    listed(&gw.client, |n| n.iter().any(|t| t == "who__whoami")).await;
    let alice = client_as(&gw.server, ProtocolChoice::Modern, Some(ALICE)).await;
    assert_eq!(answer(&alice, "who__whoami").await, ALICE);

    let (errors_tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let backend = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let errors = errors_tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    let _ = errors.send(e.to_string());
                }
            }
        })
        .user_and_password("backend".into(), "b".into())
        .connect(nats.url())
        .await
        .unwrap();
    let body = whoami_body();
    let subject = |user: &str| format!("mcp.v1.req._.{user}.who.tools.call.whoami");

    // As bob, on bob's token: allowed, and the tool sees bob.
    let frames = raw_call(&backend, &subject(&bob), claiming("bob"), &body).await;
    let (frame, answered) = frames.last().unwrap();
    assert_eq!(frame, "end", "{frames:?}");
    assert_eq!(answered["result"]["content"][0]["text"], "bob");

    // As alice, on alice's token: the broker refuses the publish.
    let inbox = backend.new_inbox();
    let mut replies = backend.subscribe(inbox.clone()).await.unwrap();
    backend
        .publish_with_reply_and_headers(
            subject(&principal_token(ALICE)),
            inbox,
            claiming(ALICE),
            body.clone().into(),
        )
        .await
        .unwrap();
    let refusal = tokio::time::timeout(WAIT, errors.recv())
        .await
        .expect("the broker says why")
        .unwrap();
    assert!(
        refusal.contains("Permissions Violation for Publish"),
        "{refusal}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), replies.next())
            .await
            .is_err(),
        "no worker got it, so no frame"
    );

    // As alice, on a subject it may use: the worker refuses the header.
    for user in [bob.as_str(), "_"] {
        let frames = raw_call(&backend, &subject(user), claiming(ALICE), &body).await;
        assert_eq!(refusal_code(&frames), wire::HEADER_MISMATCH, "{frames:?}");
    }
}

fn refusal_code(frames: &[(String, serde_json::Value)]) -> i32 {
    refusal(frames)["code"].as_i64().unwrap_or_default() as i32
}

/// The pool of `owner` (a principal) for `desk` in tenant acme: its user token is the
/// owner's, and its tools `owner` and `owner_task` (a task) answer the owner's name, so a
/// call's answer says which pool ran it. Each desk's tools say whose desk they are in their
/// descriptions too: every user's pool offers its own definition of them.
async fn desk_of(url: &str, owner: &'static str) -> Worker {
    let says = |name: &str, task: bool| {
        let def = tool_fn(
            name,
            &format!("Says whose desk this is ({owner}'s)"),
            move |_ctx: toolyard::RequestContext, _a: serde_json::Value| async move {
                Ok::<_, HandlerError>(owner.to_owned())
            },
        )
        .unwrap();
        if task {
            def.with_task_support(toolyard::proto::TaskSupport::Required)
        } else {
            def
        }
    };
    let server = ServerBuilder::new("desk", "1.0")
        .tool(says("owner", false))
        .tool(says("owner_task", true))
        .tool(says(&format!("notes_of_{owner}"), false))
        .prompt(toolyard::PromptDef::new(
            serde_json::from_value(json!({"name": "memo", "arguments": [{"name": "topic"}]}))
                .unwrap(),
            Arc::new(move |_ctx, _args| {
                Box::pin(async move {
                    let text = format!("{owner}'s memo");
                    Ok(serde_json::from_value(json!({"messages": [
                        {"role": "user", "content": {"type": "text", "text": text}}]}))
                    .unwrap())
                })
            }),
        ))
        .completer(
            toolyard::CompletionTarget::Prompt("memo".into(), "topic".into()),
            Arc::new(move |_ctx, typed: String, _| {
                Box::pin(async move {
                    toolyard::Completions::from(vec![format!("{typed} for {owner}")])
                })
            }),
        )
        .start()
        .await
        .unwrap();
    let mut config = WorkerConfig::new("desk");
    config.scope = Scope::of(Some("acme"), Some(&principal_token(owner))).unwrap();
    config.keepalive = Duration::from_millis(200);
    config.drain_timeout = Duration::from_millis(500);
    config.tasks = true;
    Worker::start(server, connect(url).await, config)
        .await
        .unwrap()
}

/// Each user's own pool behind one gateway (`user_pools`): alice's and bob's pools of `desk`
/// (each a user pool of tenant acme whose user token is its owner's principal token) behind
/// a gateway of acme. Each caller is listed what its own pool offers and nothing of another's
/// (`Audience`); its calls, and its tasks (durable jobs on its own pool's queue), run on its
/// own pool. A caller with no pool, or no principal, is listed none of desk's tools, and
/// calling one is answered as an unknown tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_sees_and_runs_only_its_own_user_pools_tools() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _alice_desk = desk_of(&url, "alice").await;
    let _bob_desk = desk_of(&url, "bob").await;
    let (server, _remote, anonymous, _following) = user_pools_gateway(&url).await;
    let connect_as = |who: &'static str| RawClient::connect_as(&server, Some(who));
    let (alice, bob, carol) = (
        connect_as("alice").await.unwrap(),
        connect_as("bob").await.unwrap(),
        connect_as("carol").await.unwrap(),
    );
    listed_to(&alice, "desk__notes_of_alice").await;
    listed_to(&bob, "desk__notes_of_bob").await;
    for (client, owner) in [(&alice, "alice"), (&bob, "bob")] {
        let mine = [
            "desk__owner",
            "desk__owner_task",
            &format!("desk__notes_of_{owner}"),
        ]
        .map(String::from);
        assert_eq!(desk_tools(client).await, BTreeSet::from(mine), "{owner}");
        let answered = call_desk(client, "desk__owner").await.unwrap();
        assert_eq!(answered["content"][0]["text"], owner, "{answered}");
        let answered = call_desk(client, &format!("desk__notes_of_{owner}"))
            .await
            .unwrap();
        assert_eq!(answered["content"][0]["text"], owner, "{answered}");
        let created = call_desk(client, "desk__owner_task").await.unwrap();
        assert_eq!(created["resultType"], "task", "{created}");
        let done = terminal(client, created["taskId"].as_str().unwrap()).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], owner, "{done}");
    }
    // A prompt of a user pool is got from, and completes on, the caller's own pool.
    listed_prompt(&bob, "desk__memo").await;
    for (client, owner) in [(&alice, "alice"), (&bob, "bob")] {
        let got = client
            .request(
                "prompts/get",
                json!({"name": "desk__memo", "_meta": answering_caller()}),
            )
            .await
            .unwrap();
        assert_eq!(
            got["messages"][0]["content"]["text"],
            format!("{owner}'s memo")
        );
        let values = memo_completed(client).await;
        assert_eq!(values, json!([format!("sal for {owner}")]), "{owner}");
    }
    for client in [&carol, &anonymous] {
        assert_eq!(memo_completed(client).await, json!([]));
    }
    // Another user's own tool is not there for alice.
    let refused = rpc_error(call_desk(&alice, "desk__notes_of_bob").await);
    assert_eq!(refused.message, "Unknown tool: desk__notes_of_bob");
    // Each task was a job on its owner's own queue.
    let js = async_nats::jetstream::new(connect(&url).await);
    let stream = js.get_stream(toolyard_nats::JOBS_STREAM).await.unwrap();
    for owner in ["alice", "bob"] {
        let consumer = format!("tyw-desk~acme~{}", principal_token(owner));
        assert!(
            stream
                .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&consumer)
                .await
                .is_ok(),
            "{consumer}"
        );
    }

    // carol has no pool, an anonymous caller no principal to reach one by: none of desk's
    // tools is theirs, and no call or task of one is made.
    for client in [&carol, &anonymous] {
        assert_eq!(desk_tools(client).await, BTreeSet::new());
        for tool in ["desk__owner", "desk__owner_task"] {
            let refused = rpc_error(call_desk(client, tool).await);
            assert_eq!(
                refused.message,
                format!("Unknown tool: {tool}"),
                "{refused:?}"
            );
        }
    }
}

/// A user's own pool starting and stopping behind a `user_pools` gateway is news to that
/// user alone: alice's listener is told her tools changed, bob's hears nothing of it (nor
/// learns that alice has a pool), and a pool for every caller is news to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_pool_coming_and_going_is_news_to_its_owner_alone() {
    let nats = NatsServer::start();
    let url = nats.url();
    let (server, _remote, _anonymous, _following) = user_pools_gateway(&url).await;
    let (alice, bob) = (
        session_of(&server, "alice").await,
        session_of(&server, "bob").await,
    );
    let alice_desk = desk_of(&url, "alice").await;
    assert!(told_tools_changed(&alice).await, "alice's pool came");
    listed_to(&alice, "desk__notes_of_alice").await;
    assert_eq!(
        heard_within_a_second(&bob).await,
        None,
        "bob heard of alice's pool"
    );

    alice_desk.shutdown().await;
    assert!(told_tools_changed(&alice).await, "alice's pool went");
    assert_eq!(desk_tools(&alice).await, BTreeSet::new());
    assert_eq!(
        heard_within_a_second(&bob).await,
        None,
        "bob heard alice's pool go"
    );

    let _who = who_worker(&url).await;
    assert!(told_tools_changed(&bob).await, "a pool for every caller");
    assert!(told_tools_changed(&alice).await, "a pool for every caller");
}

/// Regression: users' pools offering different definitions of one tool (two versions of a
/// desk; or a user whose desk describes a tool so as to steer another user's model) were
/// listed to every one of them as the newest pool had it, so alice read bob's description.
/// Now each is listed, and calls, its own pool's definition, and bob's joining is news to bob
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_is_listed_its_own_pools_definition_of_a_tool_and_never_anothers() {
    let nats = NatsServer::start();
    let url = nats.url();
    let (server, _remote, _anonymous, _following) = user_pools_gateway(&url).await;
    let (alice, bob, carol) = (
        session_of(&server, "alice").await,
        session_of(&server, "bob").await,
        session_of(&server, "carol").await,
    );
    let _alice_desk = desk_of(&url, "alice").await;
    assert!(told_tools_changed(&alice).await);
    listed_to(&alice, "desk__notes_of_alice").await;
    // What alice was told of her own desk (its prompts too), before bob's comes.
    while heard_within_a_second(&alice).await.is_some() {}
    // bob's desk, started later, is the newest entry of desk.
    let _bob_desk = desk_of(&url, "bob").await;
    assert!(told_tools_changed(&bob).await);
    listed_to(&bob, "desk__notes_of_bob").await;
    assert_eq!(
        heard_within_a_second(&alice).await,
        None,
        "alice was told of bob's desk"
    );
    for (client, owner) in [(&alice, "alice"), (&bob, "bob")] {
        let mine = format!("Says whose desk this is ({owner}'s)");
        assert_eq!(described(client).await, [mine.clone(), mine], "{owner}");
        let answered = call_desk(client, "desk__owner").await.unwrap();
        assert_eq!(answered["content"][0]["text"], owner, "{answered}");
    }
    assert_eq!(described(&carol).await, Vec::<String>::new());
    // alice's prompt is hers too.
    let prompts = alice
        .request("prompts/list", json!({"_meta": answering_caller()}))
        .await
        .unwrap();
    let memo: Vec<_> = prompts["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "desk__memo")
        .collect();
    assert_eq!(memo.len(), 1, "{prompts}");
}

/// An initialized legacy session of the gateway `server` as the principal `who` (it hears
/// list changes).
async fn session_of(server: &Server, who: &str) -> RawClient {
    let client = RawClient::connect_as(server, Some(who)).await.unwrap();
    client.initialize(json!({})).await.unwrap();
    client
}

/// The descriptions `client` is listed of `desk__owner` and `desk__owner_task`.
async fn described(client: &RawClient) -> Vec<String> {
    listed_tools(client)
        .await
        .iter()
        .filter(|t| t["name"] == "desk__owner" || t["name"] == "desk__owner_task")
        .map(|t| t["description"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A gateway of tenant acme with durable tasks that serves each caller its own user pool.
async fn user_pools_gateway(
    url: &str,
) -> (Server, RemoteTools, RawClient, tokio::task::JoinHandle<()>) {
    let config = RemoteConfig {
        caller: Scope::of(Some("acme"), None).unwrap(),
        user_pools: true,
        ..RemoteConfig::default()
    };
    durable_gateway_configured(url, config).await
}

/// Whether `client` is told within 10 s that the tools changed (other notices skipped).
async fn told_tools_changed(client: &RawClient) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Some(n)) = tokio::time::timeout_at(deadline, client.next_notification()).await {
        if n["method"] == "notifications/tools/list_changed" {
            return true;
        }
    }
    false
}

/// What `client` is told within a second, if anything.
async fn heard_within_a_second(client: &RawClient) -> Option<serde_json::Value> {
    let heard = tokio::time::timeout(Duration::from_secs(1), client.next_notification());
    heard.await.ok().flatten()
}

/// What `completion/complete` of `desk__memo`'s `topic` suggests to `client` for "sal".
async fn memo_completed(client: &RawClient) -> serde_json::Value {
    let params = json!({"ref": {"type": "ref/prompt", "name": "desk__memo"},
        "argument": {"name": "topic", "value": "sal"}, "_meta": answering_caller()});
    let answer = client.request("completion/complete", params).await.unwrap();
    answer["completion"]["values"].clone()
}

/// Waits until `client` is listed the prompt `name`.
async fn listed_prompt(client: &RawClient, name: &str) {
    listed_in(client, "prompts/list", "prompts", name).await;
}

/// The `desk__` tools `client` is listed.
async fn desk_tools(client: &RawClient) -> BTreeSet<String> {
    tools_of(client, "desk__").await
}

/// The tools `client` (a tasks-extension caller) is listed.
async fn listed_tools(client: &RawClient) -> Vec<serde_json::Value> {
    let list = client
        .request("tools/list", json!({"_meta": answering_caller()}))
        .await
        .unwrap();
    list["tools"].as_array().unwrap().clone()
}

/// The tools `client` is listed whose names start with `prefix`.
async fn tools_of(client: &RawClient, prefix: &str) -> BTreeSet<String> {
    listed_tools(client)
        .await
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// The JSON-RPC error a request was answered with.
fn rpc_error(
    answered: Result<serde_json::Value, toolyard_testkit::RawClientError>,
) -> toolyard::proto::ErrorObject {
    match answered {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => e,
        other => panic!("a JSON-RPC error expected: {other:?}"),
    }
}

/// A call of `tool` (no arguments) by a tasks-extension caller that can answer.
async fn call_desk(
    client: &RawClient,
    tool: &str,
) -> Result<serde_json::Value, toolyard_testkit::RawClientError> {
    let params = json!({"name": tool, "arguments": {}, "_meta": answering_caller()});
    client.request("tools/call", params).await
}

/// Waits until `client` (a tasks-extension caller) is listed `tool`.
async fn listed_to(client: &RawClient, tool: &str) {
    listed_in(client, "tools/list", "tools", tool).await;
}

/// Waits until `client`'s `method` (a listing whose items are under `key`) names `name`.
async fn listed_in(client: &RawClient, method: &str, key: &str, name: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let list = client
            .request(method, json!({"_meta": answering_caller()}))
            .await
            .unwrap();
        if list[key]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["name"] == name))
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never listed {name}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain client's 2026-07-28 `tools/call` of the worker's `whoami`.
fn whoami_body() -> String {
    json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "whoami", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string()
}

/// The headers of that call, claiming `principal`.
fn claiming(principal: &str) -> HeaderMap {
    let mut h = headers("tools/call", Some("whoami"));
    h.insert(wire::PRINCIPAL, principal);
    h
}

/// A worker's items for an audience of listed principals cross the bus: the worker
/// publishes them with the principals' tokens (no principal in the bucket), and the gateway
/// lists and serves each to those callers alone, the worker checking the principal again;
/// an audience that is a predicate cannot be told, so that item is offered to nobody; a
/// gateway that sends no principals offers none of them (the worker could not check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_items_for_listed_principals_reach_those_callers_alone() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tool = |name: &'static str| {
        tool_fn(
            name,
            "Says who asked",
            move |ctx: toolyard::RequestContext, _a: serde_json::Value| async move {
                Ok::<_, HandlerError>(format!("{name} for {}", ctx.principal().unwrap_or("?")))
            },
        )
        .unwrap()
    };
    let served = ServerBuilder::new("hr", "1.0")
        .tool(tool("open"))
        .tool(tool("payroll").for_audience(toolyard::Audience::principals(["alice"])))
        .tool(tool("guarded").for_audience(toolyard::Audience::when(|p| p == "alice")))
        .start()
        .await
        .unwrap();
    let _worker = Worker::start(served, connect(&url).await, WorkerConfig::new("hr"))
        .await
        .unwrap();
    let (server, _remote, anonymous, _following) =
        durable_gateway_configured(&url, RemoteConfig::default()).await;
    let alice = RawClient::connect_as(&server, Some("alice")).await.unwrap();
    let bob = RawClient::connect_as(&server, Some("bob")).await.unwrap();
    listed_to(&alice, "hr__payroll").await;
    let expected = |names: &[&str]| {
        names
            .iter()
            .map(|n| (*n).to_owned())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        tools_of(&alice, "hr__").await,
        expected(&["hr__open", "hr__payroll"])
    );
    assert_eq!(tools_of(&bob, "hr__").await, expected(&["hr__open"]));
    assert_eq!(tools_of(&anonymous, "hr__").await, expected(&["hr__open"]));
    let answered = call_desk(&alice, "hr__payroll").await.unwrap();
    assert_eq!(
        answered["content"][0]["text"], "payroll for alice",
        "{answered}"
    );
    for client in [&bob, &anonymous] {
        let refused = rpc_error(call_desk(client, "hr__payroll").await);
        assert_eq!(refused.message, "Unknown tool: hr__payroll");
    }
    let refused = rpc_error(call_desk(&alice, "hr__guarded").await);
    assert_eq!(refused.message, "Unknown tool: hr__guarded");

    // The bucket holds alice's token, never her principal.
    let js = async_nats::jetstream::new(connect(&url).await);
    let bucket = js
        .get_key_value(toolyard_nats::CATALOG_BUCKET)
        .await
        .unwrap();
    let mut keys = bucket.keys().await.unwrap();
    let key = keys.next().await.unwrap().unwrap();
    let entry = bucket.get(&key).await.unwrap().unwrap();
    let entry: serde_json::Value = serde_json::from_slice(&entry).unwrap();
    assert_eq!(
        entry["forUsers"]["tools"][0]["tokens"],
        json!([principal_token("alice")]),
        "{entry}"
    );
    assert!(!entry.to_string().contains("\"alice\""), "{entry}");

    // A gateway that sends no principal offers none of them.
    let (quiet, _quiet_remote, _, _quiet_following) = durable_gateway_configured(
        &url,
        RemoteConfig {
            forward_principal: false,
            ..RemoteConfig::default()
        },
    )
    .await;
    let alice_there = RawClient::connect_as(&quiet, Some("alice")).await.unwrap();
    listed_to(&alice_there, "hr__open").await;
    assert_eq!(
        tools_of(&alice_there, "hr__").await,
        expected(&["hr__open"])
    );
}
