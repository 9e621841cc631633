//! The official MCP SDK clients (Python `mcp`, TypeScript v1 and v2) against
//! `toolyard serve --stdio`, in every generation each client speaks. The clients and their
//! checks live in `tests/interop/`; `scripts/install-test-deps` installs them.

use toolyard_testkit::{run_client, Target};

const SERVER: &[&str] = &[env!("CARGO_BIN_EXE_toolyard"), "serve", "--stdio"];

#[test]
fn python_sdk_legacy() {
    run_client("python_client.py", "demo", "legacy", Target::Stdio(SERVER));
}

#[test]
fn python_sdk_modern() {
    run_client("python_client.py", "demo", "modern", Target::Stdio(SERVER));
}

#[test]
fn typescript_sdk_v1_legacy() {
    run_client("ts_v1_client.mjs", "demo", "legacy", Target::Stdio(SERVER));
}

#[test]
fn typescript_client_v2_legacy() {
    run_client("ts_v2_client.mjs", "demo", "legacy", Target::Stdio(SERVER));
}

#[test]
fn typescript_client_v2_modern() {
    run_client("ts_v2_client.mjs", "demo", "modern", Target::Stdio(SERVER));
}
