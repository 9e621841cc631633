//! The official MCP SDK clients (Python `mcp`, TypeScript v1 and v2) against
//! `toolyard serve --http`, over Streamable HTTP (`/mcp`) in every generation each client
//! speaks there, and over the deprecated HTTP+SSE transport (`/sse` + `/messages`). The
//! clients and their checks live in `tests/interop/` (`--transport http|sse --url ...`);
//! `scripts/install-test-deps` installs them.

use toolyard_testkit::{run_client, ServerProcess as Server, Target};

/// One fresh `toolyard serve --http` per test, the demo profile.
fn demo(script: &str, protocol: &str, transport: &str) {
    let server = Server::start(env!("CARGO_BIN_EXE_toolyard"), &["serve"]);
    let url = server.url();
    run_client(
        script,
        "demo",
        protocol,
        Target::Url {
            url: &url,
            transport,
        },
    );
}

#[test]
fn python_sdk_legacy_http() {
    demo("python_client.py", "legacy", "http");
}

#[test]
fn python_sdk_modern_http() {
    demo("python_client.py", "modern", "http");
}

#[test]
fn typescript_sdk_v1_legacy_http() {
    demo("ts_v1_client.mjs", "legacy", "http");
}

#[test]
fn typescript_client_v2_legacy_http() {
    demo("ts_v2_client.mjs", "legacy", "http");
}

#[test]
fn typescript_client_v2_modern_http() {
    demo("ts_v2_client.mjs", "modern", "http");
}

#[test]
fn python_sdk_legacy_sse() {
    demo("python_client.py", "legacy", "sse");
}

#[test]
fn typescript_sdk_v1_legacy_sse() {
    demo("ts_v1_client.mjs", "legacy", "sse");
}
