//! Criterion benches of the request path.
//!
//! - `parse`: bytes -> typed envelope (the edge's only full parse).
//! - `memory_round_trip/{legacy,modern}`: a `tools/call` of `echo` through the whole actor
//!   path (parse -> Connection -> ToolHandler -> task -> serialize -> sink) and back, one at
//!   a time, through the in-memory transport.
//! - `memory_round_trip_16`: 16 calls in flight at once.
//! - `audience/{everyone,token}`: a modern `tools/call` by an authenticated caller of a tool
//!   for everyone and of the same tool for an audience that admits it as a gateway with
//!   `user_pools` does (the SHA-256 token of the caller's principal, looked up in a set): what
//!   the check costs a call.
//!
//! - `audience/list_change_{shared,apart}`: whom a list change of one user's 50 tools
//!   reaches, asked for 1 000 listeners, when the tools share one audience (as a gateway
//!   with `user_pools` gives them since stop 65) and when each has its own (before): what
//!   the event bus spends telling a user pool's start.
//!
//! Compare the modern and legacy figures with each other, not with absolute numbers: the
//! machine is shared.

use criterion::{criterion_main, Criterion};
use serde_json::json;
use std::sync::Arc;
use toolyard::ServerBuilder;
use toolyard_testkit::RawClient;

fn bench(c: &mut Criterion) {
    let msg = br#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"message":"0123456789012345678901234567890123456789012345678901234567890123"}}}"#;
    c.bench_function("parse", |b| {
        b.iter(|| toolyard::proto::jsonrpc::parse(std::hint::black_box(msg)).is_ok())
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(async {
        let server = toolyard_testkit::demo(ServerBuilder::new("bench", "0"))
            .start()
            .await
            .expect("server");
        let client = RawClient::connect(&server).await.expect("client");
        client.initialize(json!({})).await.expect("initialize");
        Arc::new(client)
    });
    let args = json!({"name":"echo","arguments":{"message":"0123456789012345678901234567890123456789012345678901234567890123"}});
    let mut modern = args.clone();
    modern["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});

    c.bench_function("memory_round_trip/legacy", |b| {
        b.to_async(&rt)
            .iter(|| async { client.request("tools/call", &args).await.is_ok() })
    });
    c.bench_function("memory_round_trip/modern", |b| {
        b.to_async(&rt)
            .iter(|| async { client.request("tools/call", &modern).await.is_ok() })
    });
    c.bench_function("memory_round_trip_16", |b| {
        b.to_async(&rt).iter(|| async {
            let calls: Vec<_> = (0..16)
                .map(|_| {
                    let c = client.clone();
                    let a = args.clone();
                    tokio::spawn(async move { c.request("tools/call", a).await.is_ok() })
                })
                .collect();
            for call in calls {
                let _ = call.await;
            }
        })
    });

    #[cfg(feature = "nats")]
    audience(c, &rt, &modern);
}

/// The echo's arguments.
#[cfg(feature = "nats")]
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Message {
    message: String,
}

/// `audience/*`: the same echo for everyone and for an audience, called by one principal.
#[cfg(feature = "nats")]
fn audience(c: &mut Criterion, rt: &tokio::runtime::Runtime, modern: &serde_json::Value) {
    let principal = "alice@example.com";
    let client = rt.block_on(async {
        let echo = |name: &str| {
            toolyard::tool_fn(
                name,
                "Echoes",
                |_c, a: Message| async move { Ok(a.message) },
            )
            .expect("tool")
        };
        let tokens: std::collections::BTreeSet<String> = ["bob", principal, "carol"]
            .map(toolyard_nats::principal_token)
            .into();
        let for_users =
            toolyard::Audience::when(move |p| tokens.contains(&toolyard_nats::principal_token(p)));
        let server = ServerBuilder::new("bench", "0")
            .tool(echo("everyone"))
            .tool(echo("token").for_audience(for_users))
            .start()
            .await
            .expect("server");
        RawClient::connect_as(&server, Some(principal))
            .await
            .expect("client")
    });
    list_change(c);
    for tool in ["everyone", "token"] {
        let mut call = modern.clone();
        call["name"] = tool.into();
        c.bench_function(&format!("audience/{tool}"), |b| {
            b.to_async(rt)
                .iter(|| async { client.request("tools/call", &call).await.is_ok() })
        });
    }
}

/// `audience/list_change_*`: a change of 50 tools for one user's pool, asked of 1 000
/// listeners (one of them that user).
#[cfg(feature = "nats")]
fn list_change(c: &mut Criterion) {
    let pool = || {
        let tokens: std::collections::BTreeSet<String> =
            [toolyard_nats::principal_token("user-7@example.com")].into();
        toolyard::Audience::when(move |p| tokens.contains(&toolyard_nats::principal_token(p)))
    };
    let listeners: Vec<String> = (0..1000).map(|i| format!("user-{i}@example.com")).collect();
    let shared = pool();
    let mut one = toolyard::Reach::only(shared.clone());
    let mut apart = toolyard::Reach::only(pool());
    for _ in 1..50 {
        one.widen(toolyard::Reach::only(shared.clone()));
        apart.widen(toolyard::Reach::only(pool()));
    }
    for (name, reach) in [("shared", &one), ("apart", &apart)] {
        c.bench_function(&format!("audience/list_change_{name}"), |b| {
            b.iter(|| {
                listeners
                    .iter()
                    .filter(|p| reach.admits(Some(p.as_str())))
                    .count()
            })
        });
    }
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
use group::benches;
criterion_main!(benches);
