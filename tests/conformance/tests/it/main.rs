//! `conformance-server --stdio` against the official SDK clients (the conformance suite
//! itself only speaks HTTP). The client scripts live in `tests/interop/`.

mod client_suite;
mod interop_http;
mod suite;

use toolyard_testkit::{run_client, Target};

const SERVER: &[&str] = &[env!("CARGO_BIN_EXE_conformance-server"), "--stdio"];

fn stdio(script: &str, protocol: &str) {
    run_client(script, "conformance", protocol, Target::Stdio(SERVER));
}

#[test]
fn python_sdk_legacy() {
    stdio("python_client.py", "legacy");
}

#[test]
fn python_sdk_modern() {
    stdio("python_client.py", "modern");
}

#[test]
fn typescript_sdk_v1_legacy() {
    stdio("ts_v1_client.mjs", "legacy");
}

#[test]
fn typescript_client_v2_legacy() {
    stdio("ts_v2_client.mjs", "legacy");
}

#[test]
fn typescript_client_v2_modern() {
    stdio("ts_v2_client.mjs", "modern");
}
